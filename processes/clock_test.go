package processes_test

import (
	"sync"
	"time"

	"github.com/sagaengine/saga/processes"
)

// fakeClock is a processes.Clock whose time moves only when a test calls
// Advance, firing the timers that fall due. The processes run against the
// real embedded event store on loopback: a testing/synctest bubble would
// not advance its clock while a goroutine waits on the store's gRPC
// stream, which is never durably blocked.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, timers: map[*fakeTimer]struct{}{}}
}

var _ processes.Clock = (*fakeClock)(nil)

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) processes.Timer {
	t := &fakeTimer{clock: c, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Advance moves the time on by d and fires every timer due by then.
func (c *fakeClock) Advance(d time.Duration) {
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
	clock *fakeClock
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
