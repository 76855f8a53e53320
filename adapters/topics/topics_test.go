package topics

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestNewestDeadLettersReadOnlyTheTail: the console's page of the newest
// dead letters reads the last records of each partition, not the whole
// topic, which a flood of poison messages makes long.
func TestNewestDeadLettersReadOnlyTheTail(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 2,
		Topics: []string{protocol.DeadLetterTopic}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	producer, err := kafka.NewClient(b.Addrs(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer producer.Close()
	at := time.Now().Add(-time.Hour)
	for i := range 400 {
		r := &kgo.Record{Topic: protocol.DeadLetterTopic, Partition: int32(i % 2), Value: []byte(strconv.Itoa(i)),
			Timestamp: at.Add(time.Duration(i) * time.Millisecond),
			Headers:   []kgo.RecordHeader{{Key: protocol.HeaderDeadLetterReason, Value: []byte("poison")}}}
		require.NoError(t, producer.ProduceSync(ctx, r).FirstErr())
	}
	open := Dial(b.Addrs(), nil)

	letters, err := ReadNewestDeadLetters(ctx, open, 5)
	require.NoError(t, err)
	var values []string
	for _, l := range letters {
		values = append(values, *l.Value)
	}
	assert.Equal(t, []string{"399", "398", "397", "396", "395"}, values, "newest first")

	handed := 0
	require.NoError(t, read(ctx, open, protocol.DeadLetterTopic, time.Time{}, 5, func(*kgo.Record) { handed++ }))
	assert.Equal(t, 10, handed, "five records of each of the two partitions")
}
