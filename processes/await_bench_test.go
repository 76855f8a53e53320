package processes_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain"
)

// benchStore is the embedded store as the await benchmarks see it: it
// counts the appends to await inboxes and notes when each task's
// StepSucceeded was appended.
type benchStore struct {
	*eventstore.Store
	inboxAppends atomic.Int64
	// succeeded maps a task id to the time its StepSucceeded append
	// returned.
	succeeded sync.Map
}

func (s *benchStore) Append(ctx context.Context, stream string, expected domain.ExpectedRevision, events ...domain.NewEvent) (uint64, error) {
	rev, err := s.Store.Append(ctx, stream, expected, events...)
	if err != nil {
		return rev, err
	}
	if strings.HasPrefix(stream, "saga-await-") {
		s.inboxAppends.Add(1)
	} else if id, ok := domain.TaskIDFromStream(stream); ok && slices.ContainsFunc(events, func(e domain.NewEvent) bool { return e.Type == domain.StepSucceededType }) {
		s.succeeded.LoadOrStore(id, time.Now())
	}
	return rev, err
}

// awaitBenchTasks is how many tasks an await benchmark makes wait:
// SAGA_AWAIT_BENCH_TASKS, default 10,000.
func awaitBenchTasks() int {
	if v, err := strconv.Atoi(os.Getenv("SAGA_AWAIT_BENCH_TASKS")); err == nil && v > 0 {
		return v
	}
	return 10000
}

// makeWaiting submits n tasks, b-i waiting for V-i, and waits until every
// one's mark is in its inbox. With heap, it logs the live heap each
// waiting task adds (the whole process: the embedded store, the
// scheduler, the awaiter).
func makeWaiting(t *testing.T, r *awaitRig, store *benchStore, n int, heap bool) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	marks, goroutines := store.inboxAppends.Load(), runtime.NumGoroutine()
	began := time.Now()
	var wg sync.WaitGroup
	ids := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				r.submit(fmt.Sprintf("b-%d", i), fmt.Sprintf("V-%d", i))
			}
		}()
	}
	for i := range n {
		ids <- i
	}
	close(ids)
	wg.Wait()
	require.Eventually(t, func() bool { return store.inboxAppends.Load()-marks >= int64(n) }, 5*time.Minute, 50*time.Millisecond,
		"the marks of every waiting task")
	// The goroutines that put the marks go on to read their inboxes: the
	// heap is measured once they are done.
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= goroutines+16 }, time.Minute, 50*time.Millisecond,
		"the goroutines that put the marks end")
	t.Logf("%d tasks waiting after %s", n, time.Since(began).Round(time.Millisecond))
	if !heap {
		return
	}
	runtime.GC()
	var waiting runtime.MemStats
	runtime.ReadMemStats(&waiting)
	t.Logf("live heap %.1f MiB with %d tasks waiting (%.1f MiB before them: %.0f bytes per waiting task)",
		float64(waiting.HeapAlloc)/(1<<20), n, float64(before.HeapAlloc)/(1<<20),
		float64(int64(waiting.HeapAlloc)-int64(before.HeapAlloc))/float64(n))
}

// percentiles logs p50, p99 and max of latencies.
func percentiles(t *testing.T, what string, latencies []time.Duration) {
	slices.Sort(latencies)
	n := len(latencies)
	t.Logf("%s: p50 %s, p99 %s, max %s", what, latencies[n/2].Round(10*time.Microsecond), latencies[n*99/100].Round(10*time.Microsecond),
		latencies[n-1].Round(10*time.Microsecond))
}

// TestAwaitLatencyWithManyWaiting is a benchmark, run only with
// SAGA_AWAIT_BENCH set (SAGA_AWAIT_BENCH_TASKS tasks, default 10,000): with
// that many tasks waiting on await steps at once, it publishes events for
// 1,000 of them, one at a time, and reports how long each took from its
// arrival at the awaiter to its step completed in the store (the append
// of StepSucceeded). It asserts no timing.
func TestAwaitLatencyWithManyWaiting(t *testing.T) {
	if os.Getenv("SAGA_AWAIT_BENCH") == "" {
		t.Skip("a benchmark: set SAGA_AWAIT_BENCH=1")
	}
	n := awaitBenchTasks()
	store := &benchStore{Store: embeddedStore(t)}
	r := newAwaitRigOn(t, store, store, 1, 2)
	makeWaiting(t, r, store, n, true)

	events := min(1000, n)
	latencies := make([]time.Duration, 0, events)
	for k := range events {
		i := k * (n / events)
		id := fmt.Sprintf("b-%d", i)
		before := r.awaiter.Stats().Completed
		from := time.Now()
		r.offset++
		require.NoError(t, r.awaiter.HandleEvent(context.Background(), inboundPayment(r.offset, fmt.Sprintf("V-%d", i))))
		latencies = append(latencies, time.Since(from))
		require.Equal(t, before+1, r.awaiter.Stats().Completed, id)
	}
	percentiles(t, fmt.Sprintf("event to step completed, %d events with %d tasks waiting", events, n), latencies)
}

// TestAwaitLatencyThroughKafka is a benchmark, run only with
// SAGA_AWAIT_BENCH_KAFKA set: with SAGA_AWAIT_BENCH_TASKS tasks (default
// 10,000) waiting on await steps, it produces an event for each of them to
// a topic of the embedded Kafka broker, at SAGA_AWAIT_BENCH_RATE events a
// second (default 500), which the awaiter consumes as sagad's does (the
// consumer group saga-await, the scheduler with its default shards). It
// reports how long each took from its produce to the append of its
// task's StepSucceeded. It asserts no timing.
func TestAwaitLatencyThroughKafka(t *testing.T) {
	if os.Getenv("SAGA_AWAIT_BENCH_KAFKA") == "" {
		t.Skip("a benchmark: set SAGA_AWAIT_BENCH_KAFKA=1")
	}
	n := awaitBenchTasks()
	rate := 500
	if v, err := strconv.Atoi(os.Getenv("SAGA_AWAIT_BENCH_RATE")); err == nil && v > 0 {
		rate = v
	}
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 4, Logger: quiet()})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	client, err := kafka.NewClient(b.Addrs())
	require.NoError(t, err)
	t.Cleanup(client.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	store := &benchStore{Store: embeddedStore(t)}
	r := newAwaitRigOn(t, store, store, 1, 0)
	// A first event makes the topic, and tells when the awaiter consumes.
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: "shop.payments", Key: []byte("warm-up"),
		Value: []byte(`{"type":"PaymentCaptured","orderId":"warm-up"}`)}).FirstErr())
	run(t, func(ctx context.Context) error {
		return kafka.Consume(ctx, kafka.ConsumerConfig{Brokers: b.Addrs(), Group: "saga-await", Topics: []string{"shop.payments"}, Logger: quiet()},
			r.awaiter.HandleEvent)
	})
	require.Eventually(t, func() bool { return r.awaiter.Stats().Kept == 1 }, time.Minute, 10*time.Millisecond, "the awaiter consumes")
	makeWaiting(t, r, store, n, false)

	produced := make([]time.Time, n)
	var failed atomic.Int64
	began := time.Now()
	for i := range n {
		if wait := time.Until(began.Add(time.Duration(i) * time.Second / time.Duration(rate))); wait > 0 {
			time.Sleep(wait) // the pace of the events, not a synchronisation
		}
		value := fmt.Sprintf("V-%d", i)
		produced[i] = time.Now()
		client.Produce(ctx, &kgo.Record{Topic: "shop.payments", Key: []byte(value),
			Value: []byte(`{"type":"PaymentCaptured","orderId":"` + value + `","amount":12}`)}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Add(1)
			}
		})
	}
	require.NoError(t, client.Flush(ctx))
	require.Zero(t, failed.Load(), "every event produced")
	completed := func() int {
		k := 0
		store.succeeded.Range(func(any, any) bool { k++; return true })
		return k
	}
	require.Eventually(t, func() bool { return completed() == n }, 5*time.Minute, 50*time.Millisecond, "every task's step completed")
	t.Logf("%d events produced in %s", n, time.Since(began).Round(time.Millisecond))

	latencies := make([]time.Duration, 0, n)
	for i := range n {
		at, _ := store.succeeded.Load(fmt.Sprintf("b-%d", i))
		latencies = append(latencies, at.(time.Time).Sub(produced[i]))
	}
	percentiles(t, fmt.Sprintf("produce to StepSucceeded appended, %d events at %d/s with %d tasks waiting", n, rate, n), latencies)
}
