package processes_test

import (
	"time"

	"github.com/sagaengine/saga/processes/internal/fakeclock"
)

// fakeClock is a processes.Clock whose time moves only when a test calls
// Advance, firing the timers that fall due (fakeclock.Clock).
type fakeClock = fakeclock.Clock

func newFakeClock(now time.Time) *fakeClock { return fakeclock.New(now) }
