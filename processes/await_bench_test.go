package processes_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

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
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("SAGA_AWAIT_BENCH_TASKS")); err == nil && v > 0 {
		n = v
	}
	r := newAwaitRig(t, 1)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
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
	// Every task waits once its last one does (they are decided in order
	// per shard; the marks go on beside): wait for the marks of all.
	require.Eventually(t, func() bool {
		for _, i := range []int{0, n / 2, n - 1} {
			if count(eventTypes(t, r.store, fmt.Sprintf("b-%d", i)), domain.StepAwaitingType) != 1 {
				return false
			}
		}
		return true
	}, 5*time.Minute, 100*time.Millisecond)
	time.Sleep(2 * time.Second) // let the marks of the last ones settle
	t.Logf("%d tasks waiting after %s", n, time.Since(began).Round(time.Millisecond))
	runtime.GC()
	var waiting runtime.MemStats
	runtime.ReadMemStats(&waiting)
	// The whole process: the embedded store, the scheduler and the awaiter.
	t.Logf("live heap %.1f MiB with %d tasks waiting (%.1f MiB before them: %.0f bytes per waiting task)",
		float64(waiting.HeapAlloc)/(1<<20), n, float64(before.HeapAlloc)/(1<<20),
		float64(int64(waiting.HeapAlloc)-int64(before.HeapAlloc))/float64(n))

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
	slices.Sort(latencies)
	t.Logf("event to step completed, %d events with %d tasks waiting: p50 %s, p99 %s, max %s", events, n,
		latencies[events/2], latencies[events*99/100], latencies[events-1])
}
