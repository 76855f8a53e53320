package processes

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sagaengine/saga/domain"
)

// bands is how many priority ranks there are (domain.Priority.Rank).
const bands = 3

// waiters holds the tasks that wait for room at one agent, by priority
// rank, each rank's oldest first.
//
// Why this shape: waiters are woken best first by domain.AgedRank, and
// every check counts the waiters that rank above the task checked. Within
// one priority the task that has waited longer never ranks below one that
// waited less, so each rank's queue, kept oldest first, is already in
// wake order: the best waiters are found by merging the heads of three
// queues, and those ranked above a task by a binary search in each. A
// flood of orders leaves thousands of tasks waiting, and sorting or
// scanning all of them on every wake and check took most of the
// scheduler's time.
type waiters struct {
	queues [bands][]waiter
	byTask map[string]waiter
}

// waiter is a task waiting for room at an agent.
type waiter struct {
	task     string
	priority domain.Priority
	since    time.Time
	wake     func()
}

func newWaiters() *waiters { return &waiters{byTask: map[string]waiter{}} }

// before orders a queue: oldest first, then by task.
func (w waiter) before(o waiter) bool {
	if c := w.since.Compare(o.since); c != 0 {
		return c < 0
	}
	return strings.Compare(w.task, o.task) < 0
}

// find is where w is, or goes, in its queue.
func (ws *waiters) find(w waiter) (rank, index int) {
	rank = w.priority.Rank()
	q := ws.queues[rank]
	return rank, sort.Search(len(q), func(i int) bool { return !q[i].before(w) })
}

// put notes w, in place of what was noted for its task.
func (ws *waiters) put(w waiter) {
	ws.remove(w.task)
	rank, i := ws.find(w)
	ws.queues[rank] = slices.Insert(ws.queues[rank], i, w)
	ws.byTask[w.task] = w
}

// remove forgets task's wait, if any.
func (ws *waiters) remove(task string) {
	w, ok := ws.byTask[task]
	if !ok {
		return
	}
	delete(ws.byTask, task)
	rank, i := ws.find(w)
	if q := ws.queues[rank]; i < len(q) && q[i].task == task {
		ws.queues[rank] = slices.Delete(q, i, i+1)
	}
}

func (ws *waiters) len() int { return len(ws.byTask) }

// ahead counts the waiters other than task that rank above mine (lower
// domain.AgedRank) now.
func (ws *waiters) ahead(task string, mine int, now time.Time, aging time.Duration) int {
	n := 0
	for rank := range ws.queues {
		q := ws.queues[rank]
		// Ranks only grow along a queue: those above mine are a prefix.
		k := sort.Search(len(q), func(i int) bool {
			return domain.AgedRank(q[i].priority, now.Sub(q[i].since), aging) >= mine
		})
		n += k
		if own, ok := ws.byTask[task]; ok && own.priority.Rank() == rank {
			if _, i := ws.find(own); i < k {
				n--
			}
		}
	}
	return n
}

// best returns the wake calls of the n best-ranked waiters now, best first:
// by domain.AgedRank, then the one waiting longest.
func (ws *waiters) best(n int, now time.Time, aging time.Duration) []func() {
	var heads [bands]int
	out := make([]func(), 0, min(n, ws.len()))
	for len(out) < n {
		pick, pickRank := -1, 0
		for rank := range ws.queues {
			if heads[rank] >= len(ws.queues[rank]) {
				continue
			}
			w := ws.queues[rank][heads[rank]]
			r := domain.AgedRank(w.priority, now.Sub(w.since), aging)
			if pick < 0 || r < pickRank || (r == pickRank && w.since.Before(ws.queues[pick][heads[pick]].since)) {
				pick, pickRank = rank, r
			}
		}
		if pick < 0 {
			break
		}
		out = append(out, ws.queues[pick][heads[pick]].wake)
		heads[pick]++
	}
	return out
}

// count adds how many wait, by priority, to into.
func (ws *waiters) count(into map[domain.Priority]int) {
	for _, w := range ws.byTask {
		into[w.priority.OrNormal()]++
	}
}
