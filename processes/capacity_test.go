package processes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// directory is a fixed set of agent instances.
type directory struct {
	mu        sync.Mutex
	instances []protocol.AgentHeartbeat
}

func (d *directory) Instances(agent string, now time.Time) []protocol.AgentHeartbeat {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []protocol.AgentHeartbeat
	for _, h := range d.instances {
		if h.Agent == agent && h.Live(now) {
			out = append(out, h)
		}
	}
	return out
}

// RouteCommand routes a command as the Kafka adapter does
// (kafka.CommandRoute).
func (d *directory) RouteCommand(agent, instance, topic string, now time.Time) (*protocol.Route, bool) {
	return kafka.CommandRoute(d.Instances(agent, now), agent, instance, topic)
}

func (d *directory) set(instances ...protocol.AgentHeartbeat) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.instances = instances
}

func worker(instance, health string, capacity int, partition int32, at time.Time) protocol.AgentHeartbeat {
	return protocol.AgentHeartbeat{Agent: "worker", Instance: instance, Health: health, Capacity: capacity, At: at,
		ExpiresAt: at.Add(time.Hour), Partitions: map[string][]int32{protocol.CommandTopicFor("worker", domain.PriorityHigh): {partition},
			protocol.CommandTopic("worker"): {partition}, protocol.CommandTopicFor("worker", domain.PriorityLow): {partition}}}
}

// holdingAgent keeps the commands sent until the test answers them.
type holdingAgent struct {
	mu   sync.Mutex
	sent []protocol.ExecuteStep
}

func (a *holdingAgent) SendCommand(_ context.Context, cmd protocol.ExecuteStep) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sent = append(a.sent, cmd)
	return nil
}

func (a *holdingAgent) commands() []protocol.ExecuteStep {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]protocol.ExecuteStep(nil), a.sent...)
}

func (a *holdingAgent) await(t *testing.T, n int) []protocol.ExecuteStep {
	t.Helper()
	require.Eventually(t, func() bool { return len(a.commands()) >= n }, 10*time.Second, 5*time.Millisecond, "want %d commands", n)
	return a.commands()
}

func answer(t *testing.T, s *processes.Scheduler, cmd protocol.ExecuteStep, outcome, reason string) {
	t.Helper()
	r := protocol.StepReply{TaskID: cmd.TaskID, Step: cmd.Step, Action: cmd.Action, Attempt: cmd.Attempt, Outcome: outcome, Reason: reason, Tries: 1}
	if cmd.Route != nil {
		r.Instance = cmd.Route.Instance
	}
	if outcome == protocol.OutcomeUnavailable {
		r.Tries = 0
	}
	if outcome == protocol.OutcomeFailed {
		r.Failure = domain.FailureTransient
	}
	body, err := json.Marshal(r)
	require.NoError(t, err)
	require.NoError(t, s.HandleReply(context.Background(), processes.Inbound{Topic: protocol.RepliesTopic, Value: body}))
}

// TestStepsWaitForRoomAndGoInPriorityOrder runs six one-step tasks on an
// agent whose two instances take one call each: two are dispatched, one to
// each instance's partition, and the other four record that they wait.
// Each reply frees room for the highest priority waiting; a given-back
// attempt goes to the other instance without counting, and the instance
// that gave it back gets nothing until a later heartbeat says it may.
func TestStepsWaitForRoomAndGoInPriorityOrder(t *testing.T) {
	store := embeddedStore(t)
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := newFakeClock(start)
	wf := oneStep("work", 10*time.Second, domain.CompensateOnExhausted)
	dir := &directory{}
	dir.set(worker("w-1", protocol.HealthHealthy, 1, 0, start), worker("w-2", protocol.HealthHealthy, 1, 1, start))
	history{t: t, store: store, now: start}.task("t-1", wf, false)
	history{t: t, store: store, now: start}.task("t-2", wf, false)
	rec := &holdingAgent{}
	s := &processes.Scheduler{Store: store, Commands: rec, DeadLetters: dropLetters{}, Workflows: workflows{"work": wf},
		Actor: "scheduler/test", Clock: clock, Logger: quiet(), Shards: 2, Agents: dir, Router: dir}
	run(t, s.Run)
	<-s.Ready()
	sent := rec.await(t, 2)
	for _, task := range []struct {
		id string
		p  domain.Priority
	}{{"t-low", domain.PriorityLow}, {"t-normal", ""}, {"t-high", domain.PriorityHigh}, {"t-high2", domain.PriorityHigh}} {
		h := history{t: t, store: store, now: start, priority: task.p}
		h.task(task.id, wf, false)
	}
	require.Eventually(t, func() bool { return s.Waiting()["worker"] == 4 }, 10*time.Second, 5*time.Millisecond)
	assert.Len(t, rec.commands(), 2, "no more in flight than the instances take")
	routes := map[string]int32{}
	for _, c := range sent {
		require.NotNil(t, c.Route, "a command to a known agent goes to a chosen instance")
		routes[c.Route.Instance] = c.Route.Partition
	}
	assert.Equal(t, map[string]int32{"w-1": 0, "w-2": 1}, routes, "one to each instance, on the partition it consumes")
	// Waiting counts a waiter as soon as the scheduler decides it waits; its
	// StepWaiting event is stored just after, so await the events.
	waits := func() int {
		n := 0
		for _, id := range []string{"t-1", "t-2", "t-low", "t-normal", "t-high", "t-high2"} {
			n += count(eventTypes(t, store, id), domain.StepWaitingType)
		}
		return n
	}
	require.Eventually(t, func() bool { return waits() >= 4 }, 10*time.Second, 5*time.Millisecond, "each task that waits records it")
	assert.Equal(t, 4, waits(), "each task that waits records it once")

	answer(t, s, sent[0], protocol.OutcomeSucceeded, "")
	third := rec.await(t, 3)[2]
	assert.Equal(t, domain.PriorityHigh, third.Priority, "the room freed goes to a high-priority task first")

	// An instance gives an attempt back: the attempt waits again without
	// counting, and that instance gets nothing more for now.
	returning := sent[1]
	answer(t, s, returning, protocol.OutcomeUnavailable, "breaker open after: payment answered 503")
	require.Eventually(t, func() bool { return s.Waiting()["worker"] == 4 }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return count(eventTypes(t, store, returning.TaskID), domain.StepReturnedType) >= 1 },
		10*time.Second, 5*time.Millisecond, "the given-back attempt is recorded")
	assert.Equal(t, 1, count(eventTypes(t, store, returning.TaskID), domain.StepReturnedType))
	assert.Len(t, rec.commands(), 3, "the instance that gave an attempt back gets no more work")

	answer(t, s, third, protocol.OutcomeSucceeded, "")
	fourth := rec.await(t, 4)[3]
	assert.Equal(t, domain.PriorityHigh, fourth.Priority, "room at the healthy instance goes to the other high-priority task")
	assert.Equal(t, sent[0].Route.Instance, fourth.Route.Instance)

	// A later heartbeat says the instance is healthy again: it gets work.
	later := start.Add(time.Second)
	dir.set(worker("w-1", protocol.HealthHealthy, 1, 0, later), worker("w-2", protocol.HealthHealthy, 1, 1, later))
	clock.Advance(time.Second)
	fifth := rec.await(t, 5)[4]
	assert.Equal(t, returning.Route.Instance, fifth.Route.Instance)
	for answered := 5; ; answered++ {
		cmds := rec.await(t, answered)
		if c := cmds[answered-1]; c.TaskID == returning.TaskID {
			assert.Equal(t, 1, c.Attempt, "a given-back attempt does not count")
			break
		}
		answer(t, s, cmds[answered-1], protocol.OutcomeSucceeded, "")
		require.Less(t, answered, 8, "the given-back task never went again")
	}
}

// TestNoHealthyInstanceHoldsDispatchesUntilOneRecovers: with every
// instance unhealthy nothing is dispatched (the steps wait, saying why);
// once a heartbeat says an instance is on trial, one command goes to it.
func TestNoHealthyInstanceHoldsDispatchesUntilOneRecovers(t *testing.T) {
	store := embeddedStore(t)
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := newFakeClock(start)
	wf := oneStep("work", 10*time.Second, domain.CompensateOnExhausted)
	dir := &directory{}
	sick := worker("w-1", protocol.HealthUnhealthy, 4, 0, start)
	sick.Reason = "calls hang: oldest in flight 3s"
	dir.set(sick)
	for _, id := range []string{"a", "b", "c"} {
		history{t: t, store: store, now: start}.task(id, wf, false)
	}
	rec := &holdingAgent{}
	s := &processes.Scheduler{Store: store, Commands: rec, DeadLetters: dropLetters{}, Workflows: workflows{"work": wf},
		Actor: "scheduler/test", Clock: clock, Logger: quiet(), Shards: 1, Agents: dir, Router: dir}
	run(t, s.Run)
	<-s.Ready()
	require.Eventually(t, func() bool { return s.Waiting()["worker"] == 3 }, 10*time.Second, 5*time.Millisecond)
	assert.Empty(t, rec.commands())
	task, err := processes.NewTaskRepository(store).Load(context.Background(), "a")
	require.NoError(t, err)
	assert.Contains(t, task.Step("work").WaitReason, "no healthy instance of worker")
	assert.Contains(t, task.Step("work").WaitReason, "calls hang")

	dir.set(worker("w-1", protocol.HealthTrial, 4, 0, start.Add(time.Second)))
	clock.Advance(time.Second) // the scheduler looks at heartbeats again
	rec.await(t, 1)
	clock.Advance(time.Second)
	assert.Len(t, rec.commands(), 1, "an instance on trial gets one call at a time")
}

// TestTheSchedulerGoesLiveOnlyOnceItKnowsTheAgents: until the directory
// has read the heartbeats there were, the scheduler knows no instance and
// would dispatch every due step unlimited; it waits, and then keeps to the
// instances' capacity.
func TestTheSchedulerGoesLiveOnlyOnceItKnowsTheAgents(t *testing.T) {
	store := embeddedStore(t)
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	wf := oneStep("work", 10*time.Second, domain.CompensateOnExhausted)
	for _, id := range []string{"a", "b", "c"} {
		history{t: t, store: store, now: start}.task(id, wf, false)
	}
	dir := &directory{} // not read yet: no instance known
	ready := make(chan struct{})
	rec := &holdingAgent{}
	s := &processes.Scheduler{Store: store, Commands: rec, DeadLetters: dropLetters{}, Workflows: workflows{"work": wf},
		Actor: "scheduler/test", Clock: newFakeClock(start), Logger: quiet(), Shards: 1, Agents: dir, Router: dir, AgentsReady: ready}
	run(t, s.Run)
	require.Never(t, func() bool {
		select {
		case <-s.Ready():
			return true
		default:
			return false
		}
	}, 300*time.Millisecond, 10*time.Millisecond, "live before the agents are known")
	assert.Empty(t, rec.commands())

	dir.set(worker("w-1", protocol.HealthHealthy, 1, 0, start))
	close(ready)
	<-s.Ready()
	rec.await(t, 1)
	require.Eventually(t, func() bool { return s.Waiting()["worker"] == 2 }, 10*time.Second, 5*time.Millisecond)
	assert.Len(t, rec.commands(), 1, "no more than the one instance takes")
}

// TestAnInstanceThatRefusesOneTargetKeepsGettingWork: an attempt given
// back for one target (a host that hangs) waits a pause before it goes
// again, and the instance that gave it back gets other work at once,
// without waiting for a heartbeat.
func TestAnInstanceThatRefusesOneTargetKeepsGettingWork(t *testing.T) {
	store := embeddedStore(t)
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := newFakeClock(start)
	wf := oneStep("work", 10*time.Second, domain.CompensateOnExhausted)
	dir := &directory{}
	dir.set(worker("w-1", protocol.HealthHealthy, 4, 0, start))
	history{t: t, store: store, now: start}.task("t-slow", wf, false)
	rec := &holdingAgent{}
	s := &processes.Scheduler{Store: store, Commands: rec, DeadLetters: dropLetters{}, Workflows: workflows{"work": wf},
		Actor: "scheduler/test", Clock: clock, Logger: quiet(), Shards: 2, Agents: dir, Router: dir}
	run(t, s.Run)
	<-s.Ready()
	slow := rec.await(t, 1)[0]
	r := protocol.StepReply{TaskID: slow.TaskID, Step: slow.Step, Action: slow.Action, Attempt: slow.Attempt, Outcome: protocol.OutcomeUnavailable,
		Reason: "host slow:80: calls hang", Instance: "w-1", Target: "slow:80"}
	body, err := json.Marshal(r)
	require.NoError(t, err)
	require.NoError(t, s.HandleReply(context.Background(), processes.Inbound{Topic: protocol.RepliesTopic, Value: body}))
	require.Eventually(t, func() bool { return count(eventTypes(t, store, slow.TaskID), domain.StepReturnedType) == 1 },
		10*time.Second, 5*time.Millisecond)

	history{t: t, store: store, now: start}.task("t-fast", wf, false)
	fast := rec.await(t, 2)[1]
	assert.Equal(t, "t-fast", fast.TaskID, "the instance takes other work with no new heartbeat")
	assert.Equal(t, "w-1", fast.Route.Instance)
	assert.Len(t, rec.commands(), 2, "the given-back attempt waits its pause")

	clock.Advance(processes.DefaultReturnPause)
	again := rec.await(t, 3)[2]
	assert.Equal(t, "t-slow", again.TaskID)
	assert.Equal(t, 1, again.Attempt, "a given-back attempt does not count")
}

// TestFinishedTasksLeaveNothingWaiting: tasks that waited for room at each
// of their steps' agents and then finished leave no wait behind: what the
// scheduler holds for waiting tasks is bounded by the tasks still waiting,
// not by every task that ever waited.
func TestFinishedTasksLeaveNothingWaiting(t *testing.T) {
	store := embeddedStore(t)
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	wf := &domain.Workflow{Name: "three", Version: 1}
	var beats []protocol.AgentHeartbeat
	for i, agent := range []string{"first", "second", "third"} {
		wf.Steps = append(wf.Steps, domain.StepDefinition{Name: agent, Agent: agent, Budget: 10 * time.Second, MaxAttempts: 3,
			OnExhausted: domain.CompensateOnExhausted, Backoff: domain.Backoff{Initial: 300 * time.Millisecond, Multiplier: 2, Max: time.Second}})
		beat := worker(agent+"-1", protocol.HealthHealthy, 1, int32(i), start)
		beat.Agent = agent
		beat.Partitions = map[string][]int32{protocol.CommandTopicFor(agent, domain.PriorityHigh): {0},
			protocol.CommandTopic(agent): {0}, protocol.CommandTopicFor(agent, domain.PriorityLow): {0}}
		beats = append(beats, beat)
	}
	dir := &directory{}
	dir.set(beats...)
	rec := &holdingAgent{}
	s := &processes.Scheduler{Store: store, Commands: rec, DeadLetters: dropLetters{}, Workflows: workflows{"three": wf},
		Actor: "scheduler/test", Clock: newFakeClock(start), Logger: quiet(), Shards: 4, Agents: dir, Router: dir}
	run(t, s.Run)
	<-s.Ready()
	const tasks = 30
	for i := range tasks {
		history{t: t, store: store, now: start}.task(fmt.Sprintf("w-%02d", i), wf, false)
	}
	for answered := 1; answered <= 3*tasks; answered++ {
		cmds := rec.await(t, answered)
		answer(t, s, cmds[answered-1], protocol.OutcomeSucceeded, "")
	}
	require.Eventually(t, func() bool { return s.Unfinished() == 0 }, 10*time.Second, 5*time.Millisecond)
	assert.Zero(t, s.Held()["waiting"], "a finished task waits for nothing")
	assert.Empty(t, s.Waiting())
}
