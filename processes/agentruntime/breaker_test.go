package agentruntime_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/processes/agentruntime"
	"github.com/sagaengine/saga/processes/port"
)

func TestBreakerOpensOnOutagesNotOnFlakiness(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := agentruntime.NewBreaker(time.Second, port.ClockFunc(func() time.Time { return now }))
	boom := errors.New("503")

	for i := 0; i < 100; i++ { // every other call fails: flaky, not down
		require.NoError(t, b.Allow())
		if i%2 == 0 {
			b.Record(boom)
		} else {
			b.Record(nil)
		}
	}
	for i := 0; i < 30; i++ { // then a burst of timeouts
		require.NoError(t, b.Allow())
		b.Record(boom)
	}
	assert.Zero(t, b.Opened(), "a flaky service with a burst of failures is still called")

	now = now.Add(10 * time.Second) // the window has moved on
	failures := 0
	for ; failures < 100 && b.Allow() == nil; failures++ {
		b.Record(boom)
	}
	assert.Equal(t, 20, failures, "the breaker opened once the window held enough calls, all failed")
	assert.ErrorIs(t, b.Allow(), agentruntime.ErrCircuitOpen, "an unreachable service is left alone")
	assert.True(t, b.IsOpen())
	assert.Equal(t, int64(1), b.Opened())

	now = now.Add(time.Second)
	assert.False(t, b.IsOpen(), "after OpenFor a trial may go through")
	require.NoError(t, b.Allow(), "after OpenFor one trial goes through")
	assert.ErrorIs(t, b.Allow(), agentruntime.ErrCircuitOpen, "only one trial at a time")
	b.Record(boom)
	assert.ErrorIs(t, b.Allow(), agentruntime.ErrCircuitOpen, "a failed trial opens it again")

	now = now.Add(time.Second)
	require.NoError(t, b.Allow())
	b.Record(nil)
	for i := 0; i < 5; i++ {
		assert.NoError(t, b.Allow(), "a successful trial closes it")
		b.Record(nil)
	}
	permanent := agentruntime.Permanent(errors.New("422"))
	for i := 0; i < 30; i++ {
		require.NoError(t, b.Allow())
		b.Record(permanent)
	}
	assert.NoError(t, b.Allow(), "refusals are answers, not outages")
}

// TestOpenBreakerNamesTheRootCause: a refused call says what made the
// breaker open, so that a step's lastError shows the outage, not only
// "circuit breaker open".
func TestOpenBreakerNamesTheRootCause(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := agentruntime.NewBreaker(time.Second, port.ClockFunc(func() time.Time { return now }))
	var err error
	for range 100 {
		if err = b.Allow(); err != nil {
			break
		}
		b.Record(errors.New("payment service hung: context deadline exceeded"))
	}
	require.ErrorIs(t, err, agentruntime.ErrCircuitOpen)
	assert.Contains(t, err.Error(), "payment service hung")
}
