package kafka_test

import (
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/adapters/kafka/kafkatest"
)

// TestCompressionOptCompressesWithTheNamedCodec produces a compressible
// record with each codec name to the embedded broker, from two clients
// sharing the option, and reads back the batches: their compression type
// (attributes' low bits) is the named codec's. An unknown name is refused
// with ErrUnknownCompression, naming the accepted ones.
func TestCompressionOptCompressesWithTheNamedCodec(t *testing.T) {
	want := map[string]uint8{kafka.CompressionNone: 0, kafka.CompressionGzip: 1, kafka.CompressionSnappy: 2, kafka.CompressionLZ4: 3, kafka.CompressionZstd: 4}
	require.ElementsMatch(t, kafka.CompressionNames, []string{"none", "gzip", "snappy", "lz4", "zstd"})
	topics := make([]string, 0, len(want))
	for name := range want {
		topics = append(topics, "compressed."+name)
	}
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 1, Topics: topics, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(b.Close) // after the clients
	ctx := testContext(t)
	value := []byte(strings.Repeat("compress me ", 500))
	for name := range want {
		opt, err := kafka.CompressionOpt(name)
		require.NoError(t, err, name)
		// Two clients made at once share the option, as the engine's
		// clients share their options (the race detector watches).
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() {
				producer, err := kafka.NewClient(b.Addrs(), opt)
				if err == nil {
					err = producer.ProduceSync(ctx, &kgo.Record{Topic: "compressed." + name, Value: value}).FirstErr()
					producer.Close()
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err, name)
		}
	}

	seen := &kafkatest.BatchCodecs{}
	consumer := newClient(t, b, kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(seen))
	for read := 0; read < 2*len(want); {
		fetches := consumer.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fetches.EachRecord(func(r *kgo.Record) {
			assert.Equal(t, value, r.Value, "%s reads back whole", r.Topic)
			read++
		})
	}
	codes := seen.Codecs()
	for name, code := range want {
		assert.Equal(t, []uint8{code, code}, codes["compressed."+name], name)
	}

	for _, bad := range []string{"", "auto", "Snappy", "brotli"} {
		opt, err := kafka.CompressionOpt(bad)
		assert.Nil(t, opt, bad)
		require.ErrorIs(t, err, kafka.ErrUnknownCompression, bad)
		assert.ErrorContains(t, err, "want one of none, snappy, lz4, zstd, gzip", bad)
	}
}
