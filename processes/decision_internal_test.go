package processes

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// agents is a fixed set of agent instances.
type agents []protocol.AgentHeartbeat

func (a agents) Instances(agent string, now time.Time) []protocol.AgentHeartbeat {
	var out []protocol.AgentHeartbeat
	for _, h := range a {
		if h.Agent == agent && h.Live(now) {
			out = append(out, h)
		}
	}
	return out
}

// roomState prints what capacity holds, for comparing before and after.
func roomState(c *capacity) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	waiting := map[string]map[string]string{}
	for agent, ws := range c.waiting {
		waiting[agent] = map[string]string{}
		for id, w := range ws.byTask {
			waiting[agent][id] = string(w.priority) + "@" + w.since.Format(time.RFC3339Nano)
		}
	}
	return fmt.Sprint("inflight ", c.inflight, " load ", c.load, " held ", c.held, " waiting ", waiting, " avoid ", c.avoid)
}

// TestNextTwiceOnTheSameStateHasNoSideEffect runs the scheduler's decision
// for a task twice on the same state, with the agents' room as the
// scheduler admits by: whether the dispatch may go (to the instance with
// the most room) or must wait, both runs decide the same, and the
// scheduler's room (attempts in flight, held, waiting) is as it was. The
// room taken for a dispatch while it is appended is not counted against
// the decision made again after a conflict.
func TestNextTwiceOnTheSameStateHasNoSideEffect(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	wf := &domain.Workflow{Name: "work", Version: 1, Steps: []domain.StepDefinition{{Name: "work", Agent: "worker", Budget: 10 * time.Second,
		MaxAttempts: 3, OnExhausted: domain.CompensateOnExhausted, Backoff: domain.Backoff{Initial: time.Second, Multiplier: 2, Max: time.Second}}}}
	worker := func(instance string, capacity int) protocol.AgentHeartbeat {
		return protocol.AgentHeartbeat{Agent: "worker", Instance: instance, Health: protocol.HealthHealthy, Capacity: capacity, At: now,
			ExpiresAt: now.Add(time.Hour)}
	}
	submitted := func(id string, p domain.Priority) *domain.Task {
		task := domain.NewTask(id)
		task.Apply(domain.TaskSubmitted{TaskID: id, Workflow: "work", WorkflowVersion: 1, Steps: []string{"work"}, SubmittedAt: now, Priority: p})
		return task
	}
	// scheduler has one task in flight on w-1 and a low-priority one
	// waiting.
	scheduler := func(instances ...protocol.AgentHeartbeat) (*shard, *capacity) {
		s := &Scheduler{Agents: agents(instances), Clock: ClockFunc(func() time.Time { return now }), Actor: "scheduler/test", Shards: 1}
		s.setup()
		busy := submitted("busy", "")
		busy.Apply(domain.StepDispatched{TaskID: "busy", Step: "work", Agent: "worker", Instance: "w-1", Attempt: 1,
			CompleteBy: now.Add(10 * time.Second), DispatchedAt: now})
		s.capacity.track(busy)
		s.capacity.wait(&refusal{agent: "worker", task: "queued", priority: domain.PriorityLow, since: now.Add(-time.Second)}, func() {})
		return s.shards[0], s.capacity
	}

	t.Run("room", func(t *testing.T) {
		sh, c := scheduler(worker("w-1", 2), worker("w-2", 1))
		task := submitted("t-1", "")
		before := roomState(c)
		var rc roomCheck
		first := task.Next(wf, sh.decision(task, &rc))
		second := task.Next(wf, sh.decision(task, &rc))
		require.Len(t, first, 1)
		dispatched, ok := first[0].(domain.StepDispatched)
		require.True(t, ok, "%T", first[0])
		assert.Equal(t, "w-2", dispatched.Instance, "the instance with the most room for its capacity")
		assert.Equal(t, first, second, "the same decision")
		assert.Equal(t, before, roomState(c), "the decisions took no room")
		assert.Nil(t, rc.refused)

		// The shard holds the room while the dispatch is appended; after
		// a conflict, the decision made again does not count it.
		d, own := dispatchOf(task, first)
		require.True(t, c.hold(task, d, own))
		held := roomState(c)
		assert.NotEqual(t, before, held)
		again := task.Next(wf, sh.decision(task, &rc))
		assert.Equal(t, first, again, "the same decision after a conflict")
		assert.Equal(t, held, roomState(c))
		c.release(task.ID)
		assert.Equal(t, before, roomState(c))
	})

	t.Run("no room", func(t *testing.T) {
		sh, c := scheduler(worker("w-1", 1))
		task := submitted("t-2", domain.PriorityHigh)
		before := roomState(c)
		var rc roomCheck
		first := task.Next(wf, sh.decision(task, &rc))
		second := task.Next(wf, sh.decision(task, &rc))
		require.Len(t, first, 1)
		waits, ok := first[0].(domain.StepWaiting)
		require.True(t, ok, "%T", first[0])
		assert.Equal(t, "at capacity: worker takes 1 at once on 1 healthy instance", waits.Reason)
		assert.Equal(t, first, second, "the same decision")
		assert.Equal(t, before, roomState(c), "the decisions noted no waiter")
		require.NotNil(t, rc.refused, "the refusal is carried out of the decision")
		assert.Equal(t, "worker", rc.refused.agent)
	})
}

// TestAWaitLeftBehindPassesItsRoomOn: a task woken for room that its shard
// no longer holds (finished, or owned elsewhere) drops its wait, and the
// room goes to the next waiter instead of being lost at every wake.
func TestAWaitLeftBehindPassesItsRoomOn(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	one := protocol.AgentHeartbeat{Agent: "worker", Instance: "w-1", Health: protocol.HealthHealthy, Capacity: 1, At: now, ExpiresAt: now.Add(time.Hour)}
	s := &Scheduler{Agents: agents{one}, Clock: ClockFunc(func() time.Time { return now }), Actor: "scheduler/test", Shards: 1}
	s.setup()
	sh := s.shards[0]
	sh.live = true
	woken := map[string]int{}
	s.capacity.wait(&refusal{agent: "worker", task: "gone", since: now.Add(-2 * time.Second)}, func() { sh.wakeForRoom("gone") })
	s.capacity.wait(&refusal{agent: "worker", task: "next", since: now.Add(-time.Second)}, func() { woken["next"]++ })

	s.capacity.mu.Lock()
	wake := s.capacity.wakeLocked("worker")
	s.capacity.mu.Unlock()
	require.Len(t, wake, 1, "room for one")
	wake[0]()
	assert.Zero(t, woken["next"], "the oldest waiter is woken first")

	sh.roomFreed(t.Context()) // "gone" is not among the shard's tasks
	assert.Equal(t, 1, woken["next"], "its room went to the next waiter")
	assert.Equal(t, 1, s.Held()["waiting"], "only the next waiter is left")
}

// TestARefusalOutlivingItsDecisionNotesNoWait: a refusal carried out of a
// decision is noted as a wait only while the task's state says it waits;
// for a task that finished meanwhile, or moved on, nothing is noted.
func TestARefusalOutlivingItsDecisionNotesNoWait(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	one := protocol.AgentHeartbeat{Agent: "worker", Instance: "w-1", Health: protocol.HealthHealthy, Capacity: 1, At: now, ExpiresAt: now.Add(time.Hour)}
	s := &Scheduler{Agents: agents{one}, Clock: ClockFunc(func() time.Time { return now }), Actor: "scheduler/test", Shards: 1}
	s.setup()
	sh := s.shards[0]
	refused := func(id string) *roomCheck {
		return &roomCheck{refused: &refusal{agent: "worker", task: id, since: now}}
	}
	sh.decided("finished", refused("finished"), true) // not held: finished
	running := domain.NewTask("running")
	running.Apply(domain.TaskSubmitted{TaskID: "running", Workflow: "work", WorkflowVersion: 1, Steps: []string{"work"}, SubmittedAt: now})
	sh.tasks["running"] = running
	sh.decided("running", refused("running"), true) // held, but waits for nothing
	assert.Zero(t, s.Held()["waiting"])

	running.Apply(domain.StepWaiting{TaskID: "running", Step: "work", Agent: "worker", At: now})
	sh.decided("running", refused("running"), true)
	assert.Equal(t, 1, s.Held()["waiting"], "a task whose state says it waits is noted")
}
