package processes_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// inProcessAgent hands every command to a real agent runtime in the same
// process (Agent.Execute), its replies going straight to the scheduler
// (RecordReply) unless failReplies says otherwise: what sagad does for the
// agents it runs itself.
type inProcessAgent struct {
	ctx         context.Context
	agent       *processes.Agent
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

	svc := newScripted()
	usual := newReplyLog()
	ag := &processes.Agent{Name: "worker", Instance: "here/worker", Handler: svc.handle, Replies: usual, DeadLetters: dropLetters{},
		Clock: processes.SystemClock, Logger: quiet()}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sender := &inProcessAgent{ctx: ctx, agent: ag, handed: make(chan error, 10)}
	s := &processes.Scheduler{Store: store, Commands: sender, DeadLetters: dropLetters{}, Workflows: workflows{"work": wf},
		Actor: "scheduler/test", Clock: processes.SystemClock, Logger: quiet(), Shards: 1}
	sender.scheduler = s
	run(t, s.Run)

	require.Equal(t, "local-1", svc.awaitStart(t))
	require.NoError(t, <-sender.handed)
	types := eventTypes(t, store, "local-1")
	assert.Equal(t, domain.TaskProcessedType, types[len(types)-1], "%v", types)
	assert.Empty(t, usual.replies, "the reply went in process, not through the usual sender")
	assert.EqualValues(t, 1, ag.Stats().Succeeded)

	recorded, err := store.ReadStream(context.Background(), domain.TaskStream("local-1"))
	require.NoError(t, err)
	assert.Equal(t, protocol.RepliesTopic+"/in-process", recorded[len(recorded)-1].Metadata.CausationID)
}

// TestInProcessReplyFallsBackToTheUsualSender: when the in-process reply
// fails while the process runs, the agent sends it the usual way, so the
// step's outcome is not lost.
func TestInProcessReplyFallsBackToTheUsualSender(t *testing.T) {
	svc := newScripted()
	usual := newReplyLog()
	ag := &processes.Agent{Name: "worker", Instance: "here/worker", Handler: svc.handle, Replies: usual, DeadLetters: dropLetters{},
		Clock: processes.SystemClock, Logger: quiet()}
	failing := processes.ReplySenderFunc(func(context.Context, protocol.StepReply) error { return errors.New("the scheduler is not here") })
	cmd := protocol.ExecuteStep{TaskID: "fallback-1", Workflow: "work", Step: "work", Agent: "worker", Action: protocol.ActionExecute,
		Attempt: 2, CompleteBy: time.Now().Add(10 * time.Second), IdempotencyKey: "fallback-1/work"}
	require.NoError(t, ag.Execute(context.Background(), cmd, failing))
	r := usual.await(t, "fallback-1")
	assert.Equal(t, protocol.OutcomeSucceeded, r.Outcome)
	assert.Equal(t, 2, r.Attempt)
	assert.Equal(t, "here/worker", r.Instance)
}

// TestInProcessCommandPastItsDeadlineIsDropped: as a consumed one, a
// command handed over after its complete-by is not run and not answered.
func TestInProcessCommandPastItsDeadlineIsDropped(t *testing.T) {
	svc := newScripted()
	usual := newReplyLog()
	ag := &processes.Agent{Name: "worker", Instance: "here/worker", Handler: svc.handle, Replies: usual, DeadLetters: dropLetters{},
		Clock: processes.SystemClock, Logger: quiet()}
	direct := newReplyLog()
	cmd := protocol.ExecuteStep{TaskID: "late-1", Workflow: "work", Step: "work", Agent: "worker", Action: protocol.ActionExecute,
		Attempt: 1, CompleteBy: time.Now().Add(-time.Millisecond), IdempotencyKey: "late-1/work"}
	require.NoError(t, ag.Execute(context.Background(), cmd, direct))
	assert.Zero(t, svc.calls.Load())
	assert.Empty(t, direct.replies)
	assert.Empty(t, usual.replies)
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
