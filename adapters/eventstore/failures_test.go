package eventstore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
)

// TestSubscriptionFailingInPlaceIsNamed: a subscription that fails again
// and again at the same place (here, an event the store cannot read) is
// listed by SubscriptionFailures, with the place and the error, and keeps
// the time it started failing; once it delivers again it is no longer
// listed.
func TestSubscriptionFailingInPlaceIsNamed(t *testing.T) {
	s, err := eventstore.Dial("esdb://127.0.0.1:1?tls=false", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	var repaired atomic.Bool
	var tries atomic.Int64
	s.SubscribeInProcess(func(ctx context.Context, after uint64, hasAfter bool, _ string, event func(eventstore.LocalRecorded) error, caughtUp func() error) error {
		tries.Add(1)
		next := uint64(10)
		if hasAfter {
			next = after + 10
		}
		for ; next <= 20; next += 10 {
			if err := event(eventstore.LocalRecorded{Stream: "task-1", Type: "E", Data: []byte(`{}`), Position: next, Revision: next/10 - 1}); err != nil {
				return err
			}
		}
		if !repaired.Load() {
			return errors.New("damaged frame at 30")
		}
		if err := event(eventstore.LocalRecorded{Stream: "task-1", Type: "E", Data: []byte(`{}`), Position: 30, Revision: 2}); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var positions []uint64
	done := make(chan error, 1)
	go func() {
		done <- s.SubscribeAll(ctx, domain.FromStart(), "task-", func(it domain.SubscriptionItem) error {
			if it.Event != nil {
				mu.Lock()
				positions = append(positions, it.Event.Position)
				mu.Unlock()
			}
			return nil
		})
	}()

	require.Eventually(t, func() bool { return tries.Load() >= 3 }, 10*time.Second, time.Millisecond, "it keeps trying")
	failing := s.SubscriptionFailures(0)
	require.Len(t, failing, 1)
	assert.True(t, failing[0].HasAfter)
	assert.EqualValues(t, 20, failing[0].After)
	assert.ErrorContains(t, failing[0].Err, "damaged frame at 30")
	since := failing[0].Since
	require.Eventually(t, func() bool { return tries.Load() >= 4 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, since, s.SubscriptionFailures(0)[0].Since, "failing since the first try in a row")
	assert.Empty(t, s.SubscriptionFailures(time.Hour), "not failing for an hour")

	repaired.Store(true)
	// The failure is forgotten as the next event is delivered, before the
	// handler has it: wait for the handler.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(positions) == 3
	}, 10*time.Second, time.Millisecond)
	assert.Empty(t, s.SubscriptionFailures(0))
	mu.Lock()
	assert.Equal(t, []uint64{10, 20, 30}, positions, "no gap, no repeat")
	mu.Unlock()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	assert.Empty(t, s.SubscriptionFailures(0))
}
