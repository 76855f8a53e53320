package integration_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
)

// writeFinishedTasks appends n tasks of wf that ran every step to
// Processed, deciding as the scheduler would, 32 appends at a time: a long
// finished history in seconds. It returns how many events it wrote.
func writeFinishedTasks(t testing.TB, store *eventstore.Store, wf *domain.Workflow, prefix string, n int) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	written := 0
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			id := fmt.Sprintf("%s-%07d", prefix, i)
			now := time.Now()
			d := domain.Decision{Now: now, Actor: "history"}
			task := domain.NewTask(id)
			events := []domain.Event{domain.Submit(domain.Order{ID: id, Body: []byte(`{}`)}, wf, "", now)}
			task.Apply(events[0])
			for !task.State.Terminal() {
				next := task.Next(wf, d)
				if len(next) == 0 {
					var err error
					next, err = task.RecordReply(wf, domain.Reply{Step: task.InFlight()[0].Step, Attempt: 1, Succeeded: true}, d)
					require.NoError(t, err)
				}
				for _, e := range next {
					task.Apply(e)
				}
				events = append(events, next...)
			}
			batch := make([]domain.NewEvent, len(events))
			for j, e := range events {
				data, err := domain.EncodeEvent(e)
				require.NoError(t, err)
				batch[j] = domain.NewEvent{Type: e.EventType(), Data: data, Metadata: domain.EventMetadata{CorrelationID: id, Actor: "history"}}
			}
			_, err := store.Append(context.Background(), domain.TaskStream(id), domain.ExpectNoStream(), batch...)
			require.NoError(t, err)
			mu.Lock()
			written += len(batch)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return written
}

// TestSecondSchedulerJoinsALongHistoryQuickly writes a finished history,
// lets the first instance checkpoint past it, then starts a second
// scheduler and supervisor: they are delivered only the events after the
// checkpoint, not the history, and then share the work of new orders.
func TestSecondSchedulerJoinsALongHistoryQuickly(t *testing.T) {
	wf := fastWorkflow(time.Second)
	s := startSystem(t, engine.Config{Instance: "first", Workflows: []*domain.Workflow{wf}})
	registered, err := s.app.Workflows.Workflow(ctx(t, 10*time.Second), wf.Name, 0)
	require.NoError(t, err)
	const finished = 2000
	events := writeFinishedTasks(t, s.app.Store, registered, "history", finished)
	// Wait for checkpoints that cover the history: past a last task
	// written after it.
	writeFinishedTasks(t, s.app.Store, registered, "history-end", 1)
	end, err := s.app.Store.ReadStream(ctx(t, 10*time.Second), domain.TaskStream("history-end-0000000"))
	require.NoError(t, err)
	require.NotEmpty(t, end)
	last := end[len(end)-1].Position
	require.Eventually(t, func() bool {
		for _, name := range []string{"scheduler", "supervisor"} {
			cp, ok, err := s.app.Store.LoadTaskCheckpoint(context.Background(), name)
			if err != nil || !ok || cp.Position < last {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "checkpoints past the history")

	began := time.Now()
	second, err := engine.Start(engine.Config{Instance: "second", Roles: []engine.Role{engine.RoleScheduler, engine.RoleSupervisor},
		KafkaBrokers: s.app.KafkaBrokers, EventStoreURL: s.app.EventStoreURL, Workflows: []*domain.Workflow{wf},
		Logger: testLogger(), SupervisorInterval: 50 * time.Millisecond, CheckpointEvery: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(second.Close)
	<-second.Scheduler.Ready()
	<-second.Supervisor.Ready()
	live := time.Since(began)
	sched, super := second.Scheduler.Stats(), second.Supervisor.Stats()
	t.Logf("second instance live in %v over %d finished tasks (%d events); delivered at start: scheduler %d events, %d streams read; supervisor %d events, %d streams read",
		live, finished, events, sched.StartEvents, sched.StartLoads, super.StartEvents, super.StartLoads)
	assert.Less(t, sched.StartEvents, int64(events/20), "the scheduler starts from the checkpoint, not from the history")
	assert.Less(t, super.StartEvents, int64(events/20), "the supervisor starts from the checkpoint, not from the history")
	assert.Less(t, sched.StartLoads, int64(finished/20), "no finished task is read")

	ids := orderIDs("joined", 200)
	// The replies topic's partitions are shared once the group has
	// rebalanced: wait for it, or the first scheduler may do all the work.
	require.Eventually(t, func() bool {
		secondOwns := false
		for _, id := range ids {
			first, other := s.app.Scheduler.Ownership.Owns(id), second.Scheduler.Ownership.Owns(id)
			if first && other {
				return false
			}
			secondOwns = secondOwns || other
		}
		return secondOwns
	}, 30*time.Second, 10*time.Millisecond, "the two schedulers share the partitions")
	s.publishOrders(ids)
	tasks := s.awaitTerminal(ids, 2*time.Minute)
	lockedBy := map[string]int{}
	for _, id := range ids {
		// A slow machine (the race detector) may time attempts out until
		// a task compensates; either way it finished once.
		require.Contains(t, []domain.TaskState{domain.StateProcessed, domain.StateCompensated}, tasks[id].State, id)
		for _, st := range checkStream(t, id, s.stream(id)).Steps {
			if st.LockedBy != "" {
				lockedBy[st.LockedBy]++
			}
		}
	}
	assert.Len(t, lockedBy, 2, "both schedulers dispatched: %v", lockedBy)
}

// TestMeasureStartOverFinishedHistory measures how long an engine with the
// scheduler and supervisor takes to go live over a store of finished
// tasks, from the start (no checkpoint) and from a checkpoint. Run:
//
//	SAGA_MEASURE_START=50000 go test -run MeasureStart -v ./integration/
func TestMeasureStartOverFinishedHistory(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("SAGA_MEASURE_START"))
	if err != nil {
		t.Skip("a measurement: set SAGA_MEASURE_START to a number of finished tasks")
	}
	wf := fastWorkflow(time.Second)
	s := startSystem(t, engine.Config{Instance: "writer", Workflows: []*domain.Workflow{wf},
		Roles: []engine.Role{engine.RoleSubmitter, engine.RoleAgents}})
	registered, err := s.app.Workflows.Workflow(ctx(t, 10*time.Second), wf.Name, 0)
	require.NoError(t, err)
	began := time.Now()
	events := writeFinishedTasks(t, s.app.Store, registered, "history", n)
	t.Logf("wrote %d finished tasks (%d events) in %v", n, events, time.Since(began))
	for i, round := range []string{"from the start", "from the checkpoint"} {
		runtime.GC()
		var mem runtime.MemStats
		runtime.ReadMemStats(&mem)
		heapBefore := mem.HeapAlloc
		began := time.Now()
		a, err := engine.Start(engine.Config{Instance: "measured", Roles: []engine.Role{engine.RoleScheduler, engine.RoleSupervisor},
			KafkaBrokers: s.app.KafkaBrokers, EventStoreURL: s.app.EventStoreURL, Logger: testLogger(), CheckpointEvery: 100 * time.Millisecond})
		require.NoError(t, err)
		<-a.Scheduler.Ready()
		<-a.Supervisor.Ready()
		live := time.Since(began)
		runtime.GC()
		runtime.ReadMemStats(&mem)
		st := a.Scheduler.Stats()
		if i == 0 {
			require.Eventually(t, func() bool { return a.Scheduler.Stats().Checkpoints > 0 && a.Supervisor.Stats().Checkpoints > 0 },
				30*time.Second, 10*time.Millisecond)
		}
		a.Close()
		t.Logf("%s: live in %v, %d events delivered at start, %d task streams read, heap %+d MiB once live",
			round, live, st.StartEvents, st.StartLoads, (int64(mem.HeapAlloc)-int64(heapBefore))>>20)
	}
}
