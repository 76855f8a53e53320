package processes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// storeClock is an event store's clock that a test moves on.
type storeClock struct{ offset atomic.Int64 }

func (c *storeClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *storeClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// clockedStore is an embedded event store whose clock, for created times
// and $maxAge, the test moves on.
func clockedStore(t *testing.T) (*eventstore.Store, *storeClock) {
	t.Helper()
	clock := &storeClock{}
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Now: clock.now, Logger: quiet()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	store, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false", srv.Addr()), quiet())
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	return store, clock
}

// TestFinishedTasksExpireAfterTheirWorkflowsRetention: the status publisher
// gives a finished task of a workflow with a retention of an hour a
// $maxAge that covers its run and the hour. Once that has passed, its
// stream reads empty and loading it finds no task; a finished task of a
// workflow without retention, one in Error and one still running are all
// kept. A second publisher that replays the store from its start sets the
// same limits again, harmlessly.
func TestFinishedTasksExpireAfterTheirWorkflowsRetention(t *testing.T) {
	store, clock := clockedStore(t)
	kept := oneStep("kept", time.Minute, domain.ErrorOnExhausted)
	kept.Retention = domain.Retention{FinishedTasks: time.Hour}
	forever := oneStep("forever", time.Minute, domain.CompensateOnExhausted)
	wfs := workflows{"kept": kept, "forever": forever}
	ok := domain.Reply{Attempt: 1, Succeeded: true, Result: json.RawMessage(`{}`)}
	refused := domain.Reply{Attempt: 1, Failure: domain.FailurePermanent, Reason: "refused"}
	now := clock.now()
	history{t: t, store: store, now: now}.task("quick", kept, true, ok)
	// Submitted two hours before it finished: the hour counts from its end.
	history{t: t, store: store, now: now.Add(-2 * time.Hour)}.task("slow", kept, true, ok)
	history{t: t, store: store, now: now}.task("failed", kept, true, refused)
	history{t: t, store: store, now: now}.task("running", kept, true)
	history{t: t, store: store, now: now}.task("unlimited", forever, true, ok)

	retention := &processes.FinishedTaskRetention{Workflows: wfs, Limits: store, Logger: quiet()}
	p := &processes.StatusPublisher{Store: store, Checkpoints: store, Sink: &statusSink{}, Retention: retention, Logger: quiet(), Name: "status"}
	run(t, p.Run)
	require.Eventually(t, func() bool {
		_, ok, err := store.LoadCheckpoint(context.Background(), "status")
		return err == nil && ok && retention.Limited() == 2
	}, 10*time.Second, 10*time.Millisecond)

	repo := processes.NewTaskRepository(store)
	exists := func(id string) bool {
		task, err := repo.Load(context.Background(), id)
		require.NoError(t, err, id)
		return task.Exists()
	}
	clock.advance(time.Hour + 2*time.Second)
	assert.Empty(t, eventTypes(t, store, "quick"), "an hour after its end the finished task has expired")
	assert.False(t, exists("quick"))
	assert.True(t, exists("slow"), "a task that ran two hours is kept an hour after its end")
	clock.advance(2 * time.Hour)
	assert.False(t, exists("slow"))
	for _, id := range []string{"failed", "running", "unlimited"} {
		assert.True(t, exists(id), "%s is kept", id)
	}
	_, err := store.Append(context.Background(), domain.TaskStream("quick"), domain.ExpectNoStream(), domain.NewEvent{Type: "x", Data: []byte(`{}`)})
	assert.ErrorIs(t, err, domain.ErrConcurrencyConflict, "an expired task's id is still taken: a redelivered order is no new task")

	again := &processes.FinishedTaskRetention{Workflows: wfs, Limits: store, Logger: quiet()}
	replay := &processes.StatusPublisher{Store: store, Checkpoints: store, Sink: &statusSink{}, Retention: again, Logger: quiet(), Name: "replay"}
	run(t, replay.Run)
	require.Eventually(t, func() bool {
		_, ok, err := store.LoadCheckpoint(context.Background(), "replay")
		return err == nil && ok
	}, 10*time.Second, 10*time.Millisecond)
	assert.True(t, exists("failed"))
	assert.False(t, exists("quick"))
}

// TestATaskWhoseFirstEventsExpiredIsExpiredNotFolded: a stream whose first
// events are past its $maxAge while later ones are not (a long task, read
// in between) loads as domain.ErrTaskExpired, which callers also see as
// domain.ErrTaskNotFound, instead of folding what is left of it.
func TestATaskWhoseFirstEventsExpiredIsExpiredNotFolded(t *testing.T) {
	store, clock := clockedStore(t)
	work := oneStep("work", time.Minute, domain.CompensateOnExhausted)
	history{t: t, store: store, now: clock.now()}.task("long", work, false)
	clock.advance(30 * time.Minute)
	_, err := store.Append(context.Background(), domain.TaskStream("long"), domain.ExpectAny(), domain.NewEvent{Type: domain.TaskProcessedType,
		Data: []byte(`{"taskId":"long","at":"2026-01-01T00:00:00Z"}`), Metadata: domain.EventMetadata{CorrelationID: "long", Actor: "test"}})
	require.NoError(t, err)
	require.NoError(t, store.LimitStream(context.Background(), domain.TaskStream("long"), 0, time.Hour))
	clock.advance(40 * time.Minute)

	_, err = processes.NewTaskRepository(store).Load(context.Background(), "long")
	require.Error(t, err)
	assert.True(t, errors.Is(err, domain.ErrTaskExpired), "%v", err)
	assert.True(t, errors.Is(err, domain.ErrTaskNotFound), "%v", err)
}
