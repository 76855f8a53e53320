// Package fakeclock is a port.Clock for tests, whose time moves only when
// the test says.
package fakeclock

import (
	"sync"
	"time"

	"github.com/sagaengine/saga/processes/port"
)

// Clock is a port.Clock whose time moves only when a test calls
// Advance, firing the timers that fall due. The processes run against the
// real embedded event store on loopback: a testing/synctest bubble would
// not advance its clock while a goroutine waits on the store's gRPC
// stream, which is never durably blocked.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
}

// New returns a clock that tells now until Advance moves it on.
func New(now time.Time) *Clock {
	return &Clock{now: now, timers: map[*fakeTimer]struct{}{}}
}

var _ port.Clock = (*Clock)(nil)

// Now tells the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires once Advance moved the time d on.
func (c *Clock) NewTimer(d time.Duration) port.Timer {
	t := &fakeTimer{clock: c, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the time on by d and fires every timer due by then.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	var due []*fakeTimer
	for t := range c.timers {
		if !t.at.After(now) {
			due = append(due, t)
			delete(c.timers, t)
		}
	}
	c.mu.Unlock()
	for _, t := range due {
		select {
		case t.c <- now:
		default:
		}
	}
}

type fakeTimer struct {
	clock *Clock
	c     chan time.Time
	at    time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	_, pending := t.clock.timers[t]
	delete(t.clock.timers, t)
	t.drain()
	return pending
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.clock.mu.Lock()
	_, pending := t.clock.timers[t]
	t.drain()
	t.at = t.clock.now.Add(d)
	fire := d <= 0
	if !fire {
		t.clock.timers[t] = struct{}{}
	} else {
		delete(t.clock.timers, t)
	}
	now := t.clock.now
	t.clock.mu.Unlock()
	if fire {
		t.c <- now
	}
	return pending
}

// drain drops a time fired and not received, as time.Timer does since Go
// 1.23.
func (t *fakeTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}

// Pending counts the timers not fired yet.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
