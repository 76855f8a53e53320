package agentruntime_test

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/sagaengine/saga/processes/internal/fakeclock"
	"github.com/sagaengine/saga/processes/port"
)

// fakeClock is a port.Clock whose time moves only when a test calls
// Advance (fakeclock.Clock).
type fakeClock = fakeclock.Clock

func newFakeClock(now time.Time) *fakeClock { return fakeclock.New(now) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type dropLetters struct{}

func (dropLetters) DeadLetter(context.Context, port.Inbound, string) error { return nil }
