package processes_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
	"github.com/sagaengine/saga/processes/agentruntime"
	"github.com/sagaengine/saga/processes/internal/agenttest"
)

// inProcessAgent hands every command to a real agent runtime in the same
// process (Agent.Execute), its replies going straight to the scheduler
// (RecordReply) unless failReplies says otherwise: what sagad does for the
// agents it runs itself.
type inProcessAgent struct {
	ctx         context.Context
	agent       *agentruntime.Agent
	scheduler   *processes.Scheduler
	failReplies bool
	handed      chan error
}

func (c *inProcessAgent) SendCommand(_ context.Context, cmd protocol.ExecuteStep) error {
	replies := processes.ReplySenderFunc(c.scheduler.RecordReply)
	if c.failReplies {
		replies = func(context.Context, protocol.StepReply) error { return errors.New("the scheduler is not here") }
	}
	go func() { c.handed <- c.agent.Execute(c.ctx, cmd, replies) }()
	return nil
}

// letters keeps what is dead-lettered.
type letters struct {
	mu   sync.Mutex
	msgs []processes.Inbound
}

func (l *letters) DeadLetter(_ context.Context, msg processes.Inbound, _ string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, msg)
	return nil
}

// TestInProcessCommandRunsTheStepWithoutTheBroker: a task in flight is
// resumed by the scheduler, which hands the command to an agent runtime in
// process; the agent calls its service and its reply comes straight back.
// The task is processed, the reply never went to the agent's usual reply
// sender (Kafka in sagad), and the events it led to name where it came
// from.
func TestInProcessCommandRunsTheStepWithoutTheBroker(t *testing.T) {
	store := embeddedStore(t)
	wf := oneStep("work", 10*time.Second, domain.CompensateOnExhausted)
	history{t: t, store: store, now: time.Now()}.task("local-1", wf, true)

	svc := agenttest.NewScripted()
	usual := agenttest.NewReplyLog()
	ag := &agentruntime.Agent{Name: "worker", Instance: "here/worker", Handler: svc.Handle, Replies: usual, DeadLetters: dropLetters{},
		Clock: processes.SystemClock, Logger: quiet()}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sender := &inProcessAgent{ctx: ctx, agent: ag, handed: make(chan error, 10)}
	s := &processes.Scheduler{Store: store, Commands: sender, DeadLetters: dropLetters{}, Workflows: workflows{"work": wf},
		Actor: "scheduler/test", Clock: processes.SystemClock, Logger: quiet(), Shards: 1}
	sender.scheduler = s
	run(t, s.Run)

	require.Equal(t, "local-1", svc.AwaitStart(t))
	require.NoError(t, <-sender.handed)
	types := eventTypes(t, store, "local-1")
	assert.Equal(t, domain.TaskProcessedType, types[len(types)-1], "%v", types)
	assert.Empty(t, usual.Replies, "the reply went in process, not through the usual sender")
	assert.EqualValues(t, 1, ag.Stats().Succeeded)

	recorded, err := store.ReadStream(context.Background(), domain.TaskStream("local-1"))
	require.NoError(t, err)
	assert.Equal(t, protocol.RepliesTopic+"/in-process", recorded[len(recorded)-1].Metadata.CausationID)
}

// TestInProcessReplyFallsBackToTheUsualSender: when the in-process reply
// fails while the process runs, the agent sends it the usual way, so the
// step's outcome is not lost.
func TestInProcessReplyFallsBackToTheUsualSender(t *testing.T) {
	svc := agenttest.NewScripted()
	usual := agenttest.NewReplyLog()
	ag := &agentruntime.Agent{Name: "worker", Instance: "here/worker", Handler: svc.Handle, Replies: usual, DeadLetters: dropLetters{},
		Clock: processes.SystemClock, Logger: quiet()}
	failing := processes.ReplySenderFunc(func(context.Context, protocol.StepReply) error { return errors.New("the scheduler is not here") })
	cmd := protocol.ExecuteStep{TaskID: "fallback-1", Workflow: "work", Step: "work", Agent: "worker", Action: protocol.ActionExecute,
		Attempt: 2, CompleteBy: time.Now().Add(10 * time.Second), IdempotencyKey: "fallback-1/work"}
	require.NoError(t, ag.Execute(context.Background(), cmd, failing))
	r := usual.Await(t, "fallback-1")
	assert.Equal(t, protocol.OutcomeSucceeded, r.Outcome)
	assert.Equal(t, 2, r.Attempt)
	assert.Equal(t, "here/worker", r.Instance)
}

// TestInProcessCommandPastItsDeadlineIsDropped: as a consumed one, a
// command handed over after its complete-by is not run and not answered.
func TestInProcessCommandPastItsDeadlineIsDropped(t *testing.T) {
	svc := agenttest.NewScripted()
	usual := agenttest.NewReplyLog()
	ag := &agentruntime.Agent{Name: "worker", Instance: "here/worker", Handler: svc.Handle, Replies: usual, DeadLetters: dropLetters{},
		Clock: processes.SystemClock, Logger: quiet()}
	direct := agenttest.NewReplyLog()
	cmd := protocol.ExecuteStep{TaskID: "late-1", Workflow: "work", Step: "work", Agent: "worker", Action: protocol.ActionExecute,
		Attempt: 1, CompleteBy: time.Now().Add(-time.Millisecond), IdempotencyKey: "late-1/work"}
	require.NoError(t, ag.Execute(context.Background(), cmd, direct))
	assert.Zero(t, svc.Calls.Load())
	assert.Empty(t, direct.Replies)
	assert.Empty(t, usual.Replies)
	assert.EqualValues(t, 1, ag.Stats().Expired)
}

// TestInProcessReplyForAnUnknownTaskIsDeadLettered: a reply handed over in
// process that names no task is dead-lettered with its body, as a consumed
// one is, and the agent is told it was handled.
func TestInProcessReplyForAnUnknownTaskIsDeadLettered(t *testing.T) {
	store := embeddedStore(t)
	dead := &letters{}
	s := &processes.Scheduler{Store: store, Commands: &agent{hung: func(protocol.ExecuteStep) bool { return true }}, DeadLetters: dead,
		Workflows: workflows{}, Actor: "scheduler/test", Clock: processes.SystemClock, Logger: quiet(), Shards: 1}
	run(t, s.Run)
	<-s.Ready()
	err := s.RecordReply(context.Background(), protocol.StepReply{TaskID: "nobody", Step: "work", Action: protocol.ActionExecute,
		Attempt: 1, Outcome: protocol.OutcomeSucceeded})
	require.NoError(t, err)
	require.Len(t, dead.msgs, 1)
	assert.Equal(t, protocol.RepliesTopic+"/in-process", dead.msgs[0].Source())
	parsed, err := protocol.ParseStepReply(dead.msgs[0].Value)
	require.NoError(t, err)
	assert.Equal(t, "nobody", parsed.TaskID)
	assert.EqualValues(t, 1, s.Stats().RejectedReplies)
}

// oneWorkflow selects wf for every order.
type oneWorkflow struct{ wf *domain.Workflow }

func (o oneWorkflow) Select(context.Context, string, domain.OrderDocument, string) (*domain.Workflow, error) {
	return o.wf, nil
}

// orderMessage is an order as the submitter consumes it.
func orderMessage(id string) processes.Inbound {
	return processes.Inbound{Topic: "orders", Key: id, Value: []byte(`{"orderId":"` + id + `"}`),
		Headers: processes.Headers{{Key: "ce_id", Value: "msg-" + id}}}
}

// startedPair is a scheduler that answers every command, and a submitter
// that hands new tasks to it (Submitter.Starter), as in one sagad.
func startedPair(t *testing.T, ownership processes.Ownership) (*processes.Submitter, *processes.Scheduler, *countingAgent, *eventstore.Store) {
	store := embeddedStore(t)
	wf := oneStep("work", 10*time.Second, domain.CompensateOnExhausted)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	commands := &countingAgent{agent: agent{hung: func(protocol.ExecuteStep) bool { return false }, ctx: ctx}}
	s := &processes.Scheduler{Store: store, Commands: commands, DeadLetters: dropLetters{}, Workflows: workflows{"work": wf},
		Actor: "scheduler/test", Clock: processes.SystemClock, Logger: quiet(), Shards: 2, Ownership: ownership}
	commands.scheduler = s
	run(t, s.Run)
	<-s.Ready()
	sub := &processes.Submitter{Store: store, DeadLetters: dropLetters{}, Workflows: oneWorkflow{wf}, Actor: "submitter/test",
		Clock: processes.SystemClock, Logger: quiet(), Starter: s}
	return sub, s, commands, store
}

// TestSubmissionCarriesTheFirstDispatch: the submitter hands a new task to
// the scheduler of its process, which records it with its first dispatch
// in the append that creates the stream (the submission under the
// submitter's name, the dispatch under the scheduler's), then sends the
// command once: the scheduler, following the store, does not dispatch it
// again, and the task is processed. The same order again is a duplicate:
// no second task, no second command.
func TestSubmissionCarriesTheFirstDispatch(t *testing.T) {
	sub, s, commands, store := startedPair(t, nil)
	require.NoError(t, sub.HandleOrder(context.Background(), orderMessage("first-1")))
	require.EqualValues(t, 1, s.Stats().Started)

	require.Eventually(t, func() bool {
		types := eventTypes(t, store, "first-1")
		return types[len(types)-1] == domain.TaskProcessedType
	}, 10*time.Second, 5*time.Millisecond)
	recorded, err := store.ReadStream(context.Background(), domain.TaskStream("first-1"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(recorded), 2)
	assert.Equal(t, domain.TaskSubmittedType, recorded[0].Type)
	assert.Equal(t, "submitter/test", recorded[0].Metadata.Actor)
	assert.Equal(t, "msg-first-1", recorded[0].Metadata.CausationID)
	assert.Equal(t, domain.StepDispatchedType, recorded[1].Type)
	assert.Equal(t, "scheduler/test", recorded[1].Metadata.Actor)
	assert.Equal(t, "msg-first-1", recorded[1].Metadata.CausationID)
	assert.Equal(t, recorded[0].Recorded, recorded[1].Recorded, "one append")
	assert.EqualValues(t, 1, commands.sent.Load())

	require.NoError(t, sub.HandleOrder(context.Background(), orderMessage("first-1")))
	assert.EqualValues(t, 1, sub.Stats().Duplicates)
	assert.EqualValues(t, 1, s.Stats().Started)
	assert.Equal(t, 1, count(eventTypes(t, store, "first-1"), domain.TaskSubmittedType))
	assert.EqualValues(t, 1, commands.sent.Load())
}

// TestSubmissionOfATaskAnotherSchedulerOwnsIsRecordedAlone: a scheduler
// that does not own the task does not take it; the submitter records the
// submission alone, and this scheduler dispatches nothing.
func TestSubmissionOfATaskAnotherSchedulerOwnsIsRecordedAlone(t *testing.T) {
	sub, s, commands, store := startedPair(t, owningNothing{})
	require.NoError(t, sub.HandleOrder(context.Background(), orderMessage("theirs-1")))
	assert.Zero(t, s.Stats().Started)
	assert.Equal(t, []string{domain.TaskSubmittedType}, eventTypes(t, store, "theirs-1"))
	assert.Zero(t, commands.sent.Load())
	assert.EqualValues(t, 1, sub.Stats().Accepted)
}

// TestStartRefusesATaskItKnows: Start never creates a task the scheduler
// already follows; the stream's existence is then the submitter's to find.
func TestStartRefusesATaskItKnows(t *testing.T) {
	_, s, _, store := startedPair(t, nil)
	wf := oneStep("work", 10*time.Second, domain.CompensateOnExhausted)
	history{t: t, store: store, now: time.Now()}.task("known-1", wf, false)
	require.Eventually(t, func() bool { return s.Stats().Dispatched > 0 }, 10*time.Second, 5*time.Millisecond, "the scheduler follows it")
	submitted := domain.Submit(domain.Order{ID: "known-1", Body: []byte(`{}`)}, wf, "", time.Now())
	err := s.Start(context.Background(), "known-1", domain.EventMetadata{Actor: "submitter/test"}, submitted)
	require.ErrorIs(t, err, processes.ErrNotStarted)
}
