package agentruntime

import (
	"sync"
	"time"
)

// RateWindow is a sliding-window log of call starts: a call may start at t
// only if fewer than the limit started in the Period before t, so that no
// window of length Period, wherever it lies, holds more starts than the
// limit (a token bucket would let 2N through around a refill). It starts
// full, as if the most calls it ever allows had just started, so that an
// instance that restarts waits one Period before its first call and never
// adds to the calls its previous run made. It is safe for concurrent use.
type RateWindow struct {
	period time.Duration

	mu sync.Mutex
	// starts are the most recent starts, oldest first, at most max.
	starts []time.Time
	max    int
}

// NewRateWindow returns a window of period that tracks up to calls starts,
// the most any limit passed to TryTake may be, full at start.
func NewRateWindow(calls int, period time.Duration, start time.Time) *RateWindow {
	calls = max(calls, 1)
	w := &RateWindow{period: period, max: calls, starts: make([]time.Time, calls)}
	for i := range w.starts {
		w.starts[i] = start
	}
	return w
}

// TryTake records a start at now and returns 0 if fewer than limit calls
// started in the Period before now; otherwise it records nothing and
// returns how long to wait until a start may be allowed.
func (w *RateWindow) TryTake(now time.Time, limit int) time.Duration {
	limit = min(max(limit, 1), w.max)
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.starts); n >= limit {
		// The limit-th most recent start must be a whole period ago.
		if free := w.starts[n-limit].Add(w.period); free.After(now) {
			return free.Sub(now)
		}
	}
	if len(w.starts) == w.max {
		copy(w.starts, w.starts[1:])
		w.starts = w.starts[:w.max-1]
	}
	w.starts = append(w.starts, now)
	return 0
}
