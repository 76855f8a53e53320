package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// consumeBands produces, in this order, low, normal and high commands of
// one agent (each on its own key), then consumes them one at a time
// (MaxInFlight 1) and returns the priorities in the order handled, after
// the first (which the loop started before it could see the others).
func consumeBands(t *testing.T, aging time.Duration) []domain.Priority {
	topics := protocol.CommandTopics("slow")
	band := func(topic string) domain.Priority { return protocol.CommandTopicPriority("slow", topic) }
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topics...))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	produced := time.Now().Add(-time.Second)
	for _, p := range []domain.Priority{domain.PriorityLow, domain.PriorityNormal, domain.PriorityHigh} {
		for i := range 5 {
			// Kafka keeps milliseconds: each record a few older than the next.
			produced = produced.Add(5 * time.Millisecond)
			recs = append(recs, &kgo.Record{Topic: protocol.CommandTopicFor("slow", p), Key: fmt.Appendf(nil, "%s-%d", p, i), Timestamp: produced})
		}
	}
	for _, r := range recs {
		require.NoError(t, producer.ProduceSync(ctx, r).FirstErr())
	}

	var mu sync.Mutex
	var order []domain.Priority
	consumeCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- kafka.Consume(consumeCtx, kafka.ConsumerConfig{Brokers: cluster.ListenAddrs(), Group: "g", Topics: topics, MaxInFlight: 1,
			Logger: slog.New(slog.DiscardHandler), Band: band, Aging: aging},
			func(_ context.Context, msg processes.Inbound) error {
				mu.Lock()
				order = append(order, band(msg.Topic))
				first := len(order) == 1
				n := len(order)
				mu.Unlock()
				if first {
					time.Sleep(300 * time.Millisecond) // the other bands are fetched meanwhile
				}
				if n == len(recs) {
					stop()
				}
				return nil
			})
	}()
	require.NoError(t, <-done)
	require.Len(t, order, len(recs))
	return order[1:]
}

// TestConsumerTakesHigherBandsFirst: with more records waiting than are
// handled at once, every high record goes before every normal one, and
// every normal before every low, although they were produced the other
// way round.
func TestConsumerTakesHigherBandsFirst(t *testing.T) {
	order := consumeBands(t, time.Hour)
	for i := 1; i < len(order); i++ {
		assert.LessOrEqual(t, order[i-1].Rank(), order[i].Rank(), "handled in the order %v", order)
	}
}

// TestConsumerAgesWaitingRecords: once records have waited two aging
// intervals, every band competes as high and the longest waiting go
// first, so that a low band cannot starve.
func TestConsumerAgesWaitingRecords(t *testing.T) {
	order := consumeBands(t, time.Nanosecond)
	for i := 1; i < len(order); i++ {
		assert.GreaterOrEqual(t, order[i-1].Rank(), order[i].Rank(), "handled in the order %v", order)
	}
}
