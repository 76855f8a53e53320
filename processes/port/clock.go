package port

import (
	"context"
	"time"
)

// Clock tells the time and makes the timers the processes wait on, so that
// tests control both: a retry falling due, a supervisor's scan, an agent's
// backoff.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once d has passed on this clock.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a Clock. Stop and Reset behave as those of
// time.Timer since Go 1.23: after either returns, no stale time is received.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// SystemClock is the wall clock, with the runtime's timers.
var SystemClock Clock = systemClock{}

// ClockFunc is a Clock that tells the time with now (time.Now when nil)
// and waits with the runtime's timers: for callers that control only what
// time it is.
func ClockFunc(now func() time.Time) Clock {
	if now == nil {
		return SystemClock
	}
	return funcClock(now)
}

type funcClock func() time.Time

func (f funcClock) Now() time.Time               { return f() }
func (funcClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemClock struct{}

func (systemClock) Now() time.Time                 { return time.Now() }
func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// Sleep waits d on clock, or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, clock Clock, d time.Duration) bool {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
