package processes_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// TestAnOrderWaitsWhileTheEngineHoldsTheMostUnfinishedTasks: at the bound
// the submitter neither records the order nor returns, so its consumer
// stops polling and later orders stay in Kafka; once a task finishes the
// order becomes a task. An order given up while it waits (shutdown,
// rebalance) is not recorded and reports the error, so the consumer does
// not commit past it.
func TestAnOrderWaitsWhileTheEngineHoldsTheMostUnfinishedTasks(t *testing.T) {
	sub, _, _, store := startedPair(t, nil)
	var unfinished atomic.Int64
	unfinished.Store(3)
	sub.Intake = &processes.UnfinishedLimit{Max: 3, Unfinished: func() int { return int(unfinished.Load()) }, Logger: quiet()}

	exists := func(id string) bool {
		events, err := store.ReadStream(context.Background(), domain.TaskStream(id))
		return err == nil && len(events) > 0
	}
	done := make(chan error, 1)
	go func() { done <- sub.HandleOrder(context.Background(), orderMessage("held-1")) }()
	assert.Never(t, func() bool { return exists("held-1") || len(done) > 0 }, 300*time.Millisecond, 10*time.Millisecond,
		"at the bound the order is neither recorded nor acknowledged")

	unfinished.Store(2)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the order still waits once a task has finished")
	}
	assert.True(t, exists("held-1"))

	unfinished.Store(3)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- sub.HandleOrder(ctx, orderMessage("held-2")) }()
	cancel()
	require.ErrorIs(t, <-done, context.Canceled, "an order given up while it waits is not acknowledged")
	assert.False(t, exists("held-2"))
}

// TestRefusedOrdersDoNotWaitForRoom: an order that can never become a task
// is dead-lettered at once, even at the bound: waiting would only hold up
// the consumer.
func TestRefusedOrdersDoNotWaitForRoom(t *testing.T) {
	sub, _, _, _ := startedPair(t, nil)
	sub.Intake = &processes.UnfinishedLimit{Max: 1, Unfinished: func() int { return 1 }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, sub.HandleOrder(ctx, processes.Inbound{Topic: "orders", Key: "bad", Value: []byte("not json")}))
	assert.EqualValues(t, 1, sub.Stats().Rejected)
}

// TestWaitingOrdersPassOneAtATime: when one task finishes, one of many
// waiting orders passes, not all of them at once past the bound.
func TestWaitingOrdersPassOneAtATime(t *testing.T) {
	var unfinished, passed atomic.Int64
	unfinished.Store(3)
	limit := &processes.UnfinishedLimit{Max: 3, Unfinished: func() int { return int(unfinished.Load()) }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 20)
	for range 20 {
		go func() {
			release, err := limit.AwaitRoom(ctx)
			if err == nil {
				passed.Add(1)
				unfinished.Add(1) // the order became a task
				release()
			}
			errs <- err
		}()
	}
	unfinished.Add(-1)
	require.Eventually(t, func() bool { return passed.Load() == 1 }, 10*time.Second, time.Millisecond)
	assert.Never(t, func() bool { return passed.Load() > 1 }, 200*time.Millisecond, 5*time.Millisecond)
	cancel()
	given := 0
	for range 20 {
		if err := <-errs; err != nil {
			require.ErrorIs(t, err, context.Canceled)
			given++
		}
	}
	assert.Equal(t, 19, given, "the others were still waiting")
}

// TestTasksBeingStartedCountAgainstTheBound: orders let through but not yet
// recorded as tasks (the scheduler does not count them yet) take room, so
// a burst of orders at an empty engine lets only Max through.
func TestTasksBeingStartedCountAgainstTheBound(t *testing.T) {
	limit := &processes.UnfinishedLimit{Max: 5, Unfinished: func() int { return 0 }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var passed atomic.Int64
	releases := make(chan func(), 50)
	for range 50 {
		go func() {
			if release, err := limit.AwaitRoom(ctx); err == nil {
				passed.Add(1)
				releases <- release
			}
		}()
	}
	require.Eventually(t, func() bool { return passed.Load() == 5 }, 10*time.Second, time.Millisecond)
	assert.Never(t, func() bool { return passed.Load() > 5 }, 200*time.Millisecond, 5*time.Millisecond)
	(<-releases)() // one is recorded, and finishes at once
	require.Eventually(t, func() bool { return passed.Load() == 6 }, 10*time.Second, time.Millisecond)
}
