package processes

import (
	"sync"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrCircuitOpen is returned instead of calling a remote service whose
// circuit breaker is open. It is a transient failure.
var ErrCircuitOpen = errors.New("circuit breaker open")

// Breaker is a circuit breaker for one remote service. It watches the
// outcomes of the last Window calls; once at least MinCalls of them are
// known and the share of transient failures reaches FailureRatio, it opens:
// calls fail at once with ErrCircuitOpen for OpenFor. Then one trial call
// goes through; its success closes the breaker, its failure opens it again.
// A flaky service keeps being called, an unreachable one is left alone.
// Permanent failures are answers, not outages, and count as successes. It
// is safe for concurrent use.
type Breaker struct {
	Window       int
	MinCalls     int
	FailureRatio float64
	OpenFor      time.Duration
	Clock        Clock

	mu        sync.Mutex
	outcomes  []bool // true for a failure, a ring of the last Window calls
	next      int
	count     int
	failures  int
	openUntil time.Time
	open      bool
	trial     bool
	opened    int64
}

// NewBreaker returns a breaker that opens for openFor when 80 % of the last
// 20 calls (at least 10) failed.
func NewBreaker(openFor time.Duration, clock Clock) *Breaker {
	return &Breaker{Window: 20, MinCalls: 10, FailureRatio: 0.8, OpenFor: openFor, Clock: clock}
}

// Allow returns nil if a call may go through, else ErrCircuitOpen.
func (b *Breaker) Allow() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return nil
	}
	if b.Clock().Before(b.openUntil) || b.trial {
		return errors.Wrapf(ErrCircuitOpen, "until %s", b.openUntil.Format(time.RFC3339Nano))
	}
	b.trial = true // half-open: this call is the trial
	return nil
}

// Record reports the outcome of a call that Allow let through.
func (b *Breaker) Record(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	failed := err != nil && !errors.Is(err, ErrPermanent)
	if b.open {
		b.trial = false
		if failed {
			b.openUntil = b.Clock().Add(b.OpenFor)
			return
		}
		b.open = false
		b.outcomes, b.next, b.count, b.failures = nil, 0, 0, 0
		return
	}
	if b.outcomes == nil {
		b.outcomes = make([]bool, max(b.Window, 1))
	}
	if b.count == len(b.outcomes) && b.outcomes[b.next] {
		b.failures--
	}
	b.outcomes[b.next] = failed
	b.next = (b.next + 1) % len(b.outcomes)
	b.count = min(b.count+1, len(b.outcomes))
	if failed {
		b.failures++
	}
	if b.count >= b.MinCalls && float64(b.failures) >= b.FailureRatio*float64(b.count) {
		b.open, b.openUntil = true, b.Clock().Add(b.OpenFor)
		b.opened++
	}
}

// Opened counts how often the breaker opened.
func (b *Breaker) Opened() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opened
}
