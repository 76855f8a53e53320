package processes

import (
	"context"
	"time"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// EventStore is what the processes need of the event store.
type EventStore interface {
	// Append appends events if expected holds, returning the revision of
	// the last one; a conflict is domain.ErrConcurrencyConflict.
	Append(ctx context.Context, stream string, expected domain.ExpectedRevision, events ...domain.NewEvent) (uint64, error)
	// ReadStream reads every event of a stream; a missing stream is empty.
	ReadStream(ctx context.Context, stream string) ([]domain.RecordedEvent, error)
	// SubscribeAll delivers events of streams starting with streamPrefix in
	// order, then live, until ctx ends or handle fails.
	SubscribeAll(ctx context.Context, from domain.SubscribeFrom, streamPrefix string, handle func(domain.SubscriptionItem) error) error
}

// WorkflowSelector chooses the workflow a message starts (Registry.Select).
type WorkflowSelector interface {
	Select(ctx context.Context, topic string, doc domain.OrderDocument, ceType string) (*domain.Workflow, error)
}

// Inbound is a message from a topic, as a handler sees it. A message
// handed over inside the process instead (InProcess) has no partition or
// offset: both are -1.
type Inbound struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Value     []byte
	Headers   map[string]string
}

// Source names where a message came from, for causation ids and logs.
func (m Inbound) Source() string {
	if m.InProcess() {
		return m.Topic + "/in-process"
	}
	return m.Topic + "/" + itoa(int64(m.Partition)) + "/" + itoa(m.Offset)
}

// InProcess reports whether the message was handed over inside the
// process rather than consumed from its topic.
func (m Inbound) InProcess() bool { return m.Offset < 0 }

// inProcess is the Inbound of a message of topic handed over inside the
// process, carrying traceparent as consumed messages carry it.
func inProcess(topic, key, traceparent string) Inbound {
	return Inbound{Topic: topic, Partition: -1, Offset: -1, Key: key, Headers: map[string]string{protocol.HeaderTraceParent: traceparent}}
}

// CommandSender delivers commands to agents.
type CommandSender interface {
	SendCommand(ctx context.Context, cmd protocol.ExecuteStep) error
}

// TaskStarter records a new task together with the first decisions for
// it, in one append (Scheduler.Start); ErrNotStarted means the caller must
// record the submission alone.
type TaskStarter interface {
	Start(ctx context.Context, id string, meta domain.EventMetadata, submitted ...domain.Event) error
}

// AgentDirectory knows the agent instances that announce themselves with
// heartbeats (protocol.AgentsTopic).
type AgentDirectory interface {
	// Instances returns the last heartbeat of every instance of agent
	// that is live at now, in a stable order; none for an agent that
	// sends no heartbeats.
	Instances(agent string, now time.Time) []protocol.AgentHeartbeat
}

// Heartbeats announce agent instances on protocol.AgentsTopic.
type Heartbeats interface {
	// Beat publishes an instance's heartbeat and waits until the broker
	// has it.
	Beat(ctx context.Context, hb protocol.AgentHeartbeat) error
	// Leave removes a stopped instance: a tombstone under its key.
	Leave(ctx context.Context, instance string) error
}

// ReplySender delivers agents' replies to the scheduler.
type ReplySender interface {
	SendReply(ctx context.Context, reply protocol.StepReply) error
}

// ReplySenderFunc is a ReplySender that is a function.
type ReplySenderFunc func(ctx context.Context, reply protocol.StepReply) error

// SendReply calls f.
func (f ReplySenderFunc) SendReply(ctx context.Context, reply protocol.StepReply) error {
	return f(ctx, reply)
}

// DeadLetters keeps messages that cannot be processed, with the reason, so
// nothing is lost.
type DeadLetters interface {
	DeadLetter(ctx context.Context, msg Inbound, reason string) error
}

// Clock tells the time and makes the timers the processes wait on, so that
// tests control both: a retry falling due, a supervisor's scan, an agent's
// backoff.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once d has passed on this clock.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a Clock. Stop and Reset behave as those of
// time.Timer since Go 1.23: after either returns, no stale time is received.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// SystemClock is the wall clock, with the runtime's timers.
var SystemClock Clock = systemClock{}

// ClockFunc is a Clock that tells the time with now (time.Now when nil)
// and waits with the runtime's timers: for callers that control only what
// time it is.
func ClockFunc(now func() time.Time) Clock {
	if now == nil {
		return SystemClock
	}
	return funcClock(now)
}

type funcClock func() time.Time

func (f funcClock) Now() time.Time               { return f() }
func (funcClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemClock struct{}

func (systemClock) Now() time.Time                 { return time.Now() }
func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// sleep waits d on clock, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, clock Clock, d time.Duration) bool {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// Ownership says which tasks an instance is responsible for when several
// instances share the work (by Kafka partition of the task id). Correctness
// never depends on it: every append carries its expected revision.
type Ownership interface {
	Owns(taskID string) bool
}

// Leadership says whether this instance is the elected one among several
// that could act. Correctness never depends on it either.
type Leadership interface {
	IsLeader() bool
}

// Alerts tells operators about tasks that need them, and about those that
// no longer do (resolved alerts).
type Alerts interface {
	// RaiseAlert sends an alert, raised or resolved, and waits until it is
	// delivered.
	RaiseAlert(ctx context.Context, alert protocol.Alert) error
}

// Checkpoints keep how far a follower of the store got, so that it resumes
// there after a restart.
type Checkpoints interface {
	LoadCheckpoint(ctx context.Context, name string) (position uint64, ok bool, err error)
	SaveCheckpoint(ctx context.Context, name string, position uint64) error
}

// TaskCheckpoints keep task checkpoints under a name, so that a follower,
// or another instance of it, resumes there. Saving keeps the stream of a
// name bounded; loading returns the newest saved.
type TaskCheckpoints interface {
	LoadTaskCheckpoint(ctx context.Context, name string) (domain.TaskCheckpoint, bool, error)
	SaveTaskCheckpoint(ctx context.Context, name string, cp domain.TaskCheckpoint) error
}

// StatusSink delivers task status messages to StatusTopic and to the
// order's reply topic.
type StatusSink interface {
	// PublishStatus sends a status without waiting for it.
	PublishStatus(ctx context.Context, status protocol.TaskStatus)
	// Flush waits for every status sent so far and reports whether one
	// could not be delivered.
	Flush(ctx context.Context) error
}

// ReplyTopicForgetter is a StatusSink that keeps something per reply topic
// (a Kafka client keeps each topic's metadata, and refreshes it for as long
// as it knows the topic, which makes a broker that auto-creates topics
// create a deleted one again). The status publisher tells it, after a
// flush, the reply topics of the tasks that finished and that no
// unfinished task it follows names.
type ReplyTopicForgetter interface {
	ForgetReplyTopics(topics []string)
}
