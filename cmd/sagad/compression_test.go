package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/kafka"
)

// TestUnknownKafkaCompressionStopsSagadAtStart: an unknown codec, from the
// flag or from $SAGA_KAFKA_COMPRESSION, stops sagad before it starts
// anything, naming the setting and the accepted names.
func TestUnknownKafkaCompressionStopsSagadAtStart(t *testing.T) {
	args := []string{"--data", t.TempDir(), "--http-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--eventstore-listen", "127.0.0.1:0"}
	err := runAll(context.Background(), append(args, "--kafka-compression", "brotli"), slog.New(slog.DiscardHandler))
	require.ErrorIs(t, err, kafka.ErrUnknownCompression)
	assert.ErrorContains(t, err, `KafkaCompression: unknown Kafka compression "brotli": want one of none, snappy, lz4, zstd, gzip, or auto`)

	t.Setenv("SAGA_KAFKA_COMPRESSION", "lzma")
	err = runAll(context.Background(), args, slog.New(slog.DiscardHandler))
	require.ErrorIs(t, err, kafka.ErrUnknownCompression)
	assert.ErrorContains(t, err, `"lzma"`)
}
