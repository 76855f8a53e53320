package agentruntime

import (
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/processes/port"
)

// ErrCircuitOpen is returned instead of calling a remote service whose
// circuit breaker is open. It is a transient failure.
var ErrCircuitOpen = errors.New("circuit breaker open")

// CircuitOpenError is the refusal of an open breaker: errors.Is(err,
// ErrCircuitOpen) holds for it. Cause is the failure that opened the
// breaker, the root cause to report rather than the refusal.
type CircuitOpenError struct {
	Until time.Time
	Cause string
	// Target, when set, is the one target the handler refuses to call
	// now (a host, for the built-in HTTP agent): the instance itself takes
	// other work, and gives the command back naming it.
	Target string
}

func (e *CircuitOpenError) Error() string {
	return ErrCircuitOpen.Error() + " until " + e.Until.Format(time.RFC3339Nano) + ", after: " + e.Cause
}

// Is makes errors.Is(err, ErrCircuitOpen) hold.
func (e *CircuitOpenError) Is(target error) bool { return target == ErrCircuitOpen }

// breakerBuckets is how many slices the breaker's time window has.
const breakerBuckets = 10

// Breaker is a circuit breaker for one remote service. It counts the
// outcomes of calls over a sliding time window (ten buckets); once the
// window holds at least MinCalls outcomes and the share of transient
// failures reaches FailureRatio, it opens: calls fail at once with
// ErrCircuitOpen for OpenFor. Then one trial call goes through; its success
// closes the breaker, its failure opens it again.
//
// Counting over time rather than over the last N calls keeps a burst of
// timeouts (hung calls all give up at their deadline together) from
// tripping a breaker on a service that mostly works: a flaky service keeps
// being called, an unreachable one is left alone. Permanent failures are
// answers, not outages, and count as successes. It is safe for concurrent
// use.
type Breaker struct {
	Window       time.Duration
	MinCalls     int
	FailureRatio float64
	OpenFor      time.Duration
	Clock        port.Clock

	mu        sync.Mutex
	buckets   [breakerBuckets]bucket
	openUntil time.Time
	open      bool
	trial     bool
	opened    int64
	// lastFailure is the last failure recorded: the root cause an open
	// breaker reports, so that a refused call names what went wrong.
	lastFailure string
}

type bucket struct {
	slot                int64
	successes, failures int
}

// NewBreaker returns a breaker that opens for openFor when 80 % of the
// calls of the last 5 s (at least 20) failed.
func NewBreaker(openFor time.Duration, clock port.Clock) *Breaker {
	return &Breaker{Window: 5 * time.Second, MinCalls: 20, FailureRatio: 0.8, OpenFor: openFor, Clock: clock}
}

// Allow returns nil if a call may go through, else ErrCircuitOpen.
func (b *Breaker) Allow() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return nil
	}
	if b.Clock.Now().Before(b.openUntil) || b.trial {
		return &CircuitOpenError{Until: b.openUntil, Cause: b.lastFailure}
	}
	b.trial = true // half-open: this call is the trial
	return nil
}

// Record reports the outcome of a call that Allow let through.
func (b *Breaker) Record(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	failed := err != nil && !errors.Is(err, ErrPermanent)
	if failed {
		b.lastFailure = err.Error()
	}
	now := b.Clock.Now()
	if b.open {
		b.trial = false
		if failed {
			b.openUntil = now.Add(b.OpenFor)
			return
		}
		b.open = false
		b.buckets = [breakerBuckets]bucket{}
		return
	}
	width := max(b.Window/breakerBuckets, time.Millisecond)
	slot := now.UnixNano() / int64(width)
	cur := &b.buckets[slot%breakerBuckets]
	if cur.slot != slot {
		*cur = bucket{slot: slot}
	}
	if failed {
		cur.failures++
	} else {
		cur.successes++
	}
	var calls, failures int
	for _, bk := range b.buckets {
		if slot-bk.slot < breakerBuckets {
			calls += bk.successes + bk.failures
			failures += bk.failures
		}
	}
	if calls >= b.MinCalls && float64(failures) >= b.FailureRatio*float64(calls) {
		b.open, b.openUntil = true, now.Add(b.OpenFor)
		b.opened++
	}
}

// IsOpen reports whether calls are being refused now, without taking the
// trial call.
func (b *Breaker) IsOpen() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open && (b.Clock.Now().Before(b.openUntil) || b.trial)
}

// Opened counts how often the breaker opened.
func (b *Breaker) Opened() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.opened
}

// BreakerState is what a breaker, or the breakers a handler keeps (one per
// host in the built-in HTTP agent), say of the service: Open while calls
// are refused, Trial once OpenFor has passed and a trial call may go
// through (or one is under way). Cause is the failure that opened it.
type BreakerState struct {
	Open, Trial bool
	Cause       string
}

// State returns the breaker's state now.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return BreakerState{}
	}
	if b.trial || !b.Clock.Now().Before(b.openUntil) {
		return BreakerState{Trial: true, Cause: b.lastFailure}
	}
	return BreakerState{Open: true, Cause: b.lastFailure}
}
