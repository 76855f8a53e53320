package processes

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

// TestWaitersAgreeWithSortingThemAll: the per-priority queues wake the
// same waiters in the same order, and count the same waiters ahead of a
// task, as ranking every waiter by domain.AgedRank and time waited does,
// through random waits, re-waits and departures.
func TestWaitersAgreeWithSortingThemAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 25))
	priorities := []domain.Priority{domain.PriorityHigh, domain.PriorityNormal, domain.PriorityLow, ""}
	const aging = time.Second
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	ws := newWaiters()
	all := map[string]waiter{}
	woke := map[string]int{}
	for step := range 3000 {
		task := "t" + strconv.Itoa(rng.IntN(400))
		switch rng.IntN(4) {
		case 0:
			ws.remove(task)
			delete(all, task)
		default:
			w := waiter{task: task, priority: priorities[rng.IntN(len(priorities))],
				since: now.Add(-time.Duration(rng.IntN(3_000_000)) * time.Microsecond)}
			w.wake = func() { woke[task]++ }
			ws.put(w)
			all[task] = w
		}
		require.Equal(t, len(all), ws.len())
		if step%50 != 0 {
			continue
		}
		sorted := make([]waiter, 0, len(all))
		for _, w := range all {
			sorted = append(sorted, w)
		}
		rank := func(w waiter) int { return domain.AgedRank(w.priority, now.Sub(w.since), aging) }
		slices.SortFunc(sorted, func(a, b waiter) int {
			if ra, rb := rank(a), rank(b); ra != rb {
				return ra - rb
			}
			return a.since.Compare(b.since)
		})
		n := rng.IntN(len(sorted) + 2)
		clear(woke)
		for _, wake := range ws.best(n, now, aging) {
			wake()
		}
		for i, w := range sorted {
			require.Equal(t, i < n, woke[w.task] == 1, "step %d: %s woken among the best %d", step, w.task, n)
		}
		for _, w := range sorted[:min(20, len(sorted))] {
			mine := rank(w)
			want := 0
			for _, o := range sorted {
				if o.task != w.task && rank(o) < mine {
					want++
				}
			}
			require.Equal(t, want, ws.ahead(w.task, mine, now, aging), "step %d: ahead of %s", step, w.task)
		}
	}
}
