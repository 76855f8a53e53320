package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/processes"
)

// TestConsumerKeepsKeyOrderAndLosesNothingWhenStopped: records of a key
// are handled one after another in order, by workers that go from key to
// key; a loop stopped half-way commits only what it handled, so the next
// one starts each key at or before the first record not handled.
func TestConsumerKeepsKeyOrderAndLosesNothingWhenStopped(t *testing.T) {
	const keys, perKey = 20, 15
	ctx := testContext(t)
	var recs []*kgo.Record
	for seq := range perKey {
		for k := range keys {
			recs = append(recs, &kgo.Record{Topic: "work", Key: fmt.Appendf(nil, "k%d", k), Value: fmt.Appendf(nil, "k%d:%d", k, seq)})
		}
	}
	cluster := clusterWith(t, ctx, 3, recs)

	// run consumes until enough says so, and returns the sequence numbers
	// handled per key, in the order handled.
	run := func(enough func(handled int, seen map[string][]int) bool) map[string][]int {
		var mu sync.Mutex
		seen := map[string][]int{}
		handled := 0
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		done := make(chan error, 1)
		go func() {
			done <- kafka.Consume(runCtx, kafka.ConsumerConfig{Brokers: cluster.ListenAddrs(), Group: "g", Topics: []string{"work"},
				MaxInFlight: 4, Logger: slog.New(slog.DiscardHandler)},
				func(hctx context.Context, msg processes.Inbound) error {
					if hctx.Err() != nil {
						return hctx.Err() // stopping: not handled
					}
					key, seq, _ := strings.Cut(string(msg.Value), ":")
					n, _ := strconv.Atoi(seq)
					mu.Lock()
					defer mu.Unlock()
					seen[key] = append(seen[key], n)
					if handled++; enough(handled, seen) {
						stop()
					}
					return nil
				})
		}()
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
	first := run(func(handled int, _ map[string][]int) bool { return handled == keys*perKey/2 })
	second := run(func(_ int, seen map[string][]int) bool {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			s := append(append([]int(nil), first[key]...), seen[key]...)
			if len(s) == 0 || s[len(s)-1] != perKey-1 {
				return false
			}
		}
		return true
	})
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		a, b := first[key], second[key]
		for i := range a {
			require.Equal(t, i, a[i], "key %s handled out of order: %v", key, a)
		}
		if len(a) == perKey {
			continue // all handled by the first loop
		}
		require.NotEmpty(t, b, "key %s", key)
		// The second loop starts at or before the first record not handled,
		// and goes on in order.
		assert.LessOrEqual(t, b[0], len(a), "key %s: handled %v, then %v", key, a, b)
		for i := 1; i < len(b); i++ {
			require.Equal(t, b[i-1]+1, b[i], "key %s handled out of order: %v", key, b)
		}
	}
}

// clusterWith starts a broker whose topic (that of recs, all on one topic)
// has the given partitions, and produces recs to it.
func clusterWith(t *testing.T, ctx context.Context, partitions int32, recs []*kgo.Record) *kfake.Cluster {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, recs[0].Topic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	require.NoError(t, err)
	defer producer.Close()
	require.NoError(t, producer.ProduceSync(ctx, recs...).FirstErr())
	return cluster
}

// consumeWorkers counts the goroutines working for or waiting in a
// consume loop.
func consumeWorkers() int {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return strings.Count(b.String(), "kafka.(*consumer).run(")
}

// TestConsumerWorkersIdleOut: the workers a burst of keys needed end once
// idle, while the loop goes on; none is left once it stops.
func TestConsumerWorkersIdleOut(t *testing.T) {
	defer kafka.SetIdleWorkerLife(50 * time.Millisecond)()
	ctx := testContext(t)
	var recs []*kgo.Record
	for k := range 64 {
		recs = append(recs, &kgo.Record{Topic: "burst", Key: fmt.Appendf(nil, "k%d", k)})
	}
	cluster := clusterWith(t, ctx, 2, recs)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	release := make(chan struct{})
	var handled atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- kafka.Consume(runCtx, kafka.ConsumerConfig{Brokers: cluster.ListenAddrs(), Group: "g", Topics: []string{"burst"},
			MaxInFlight: 16, Logger: slog.New(slog.DiscardHandler)},
			func(context.Context, processes.Inbound) error {
				<-release
				handled.Add(1)
				return nil
			})
	}()
	// 16 keys at once hold 16 workers, and no more.
	require.Eventually(t, func() bool { return consumeWorkers() >= 16 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, 16, consumeWorkers(), "workers beyond the records in flight")
	close(release)
	require.Eventually(t, func() bool { return handled.Load() == int32(len(recs)) }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return consumeWorkers() == 0 }, 10*time.Second, 10*time.Millisecond, "idle workers did not end")
	stop()
	require.NoError(t, <-done)
	assert.Zero(t, consumeWorkers())
}
