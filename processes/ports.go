package processes

import (
	"context"
	"time"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/port"
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

// Inbound is a message from a topic, as a handler sees it (port.Inbound).
type Inbound = port.Inbound

// Headers are an Inbound's headers (port.Headers).
type Headers = port.Headers

// CommandSender delivers commands to agents.
type CommandSender interface {
	SendCommand(ctx context.Context, cmd protocol.ExecuteStep) error
}

// CommandRouter maps the agent instance a dispatch names to where its
// command goes: for Kafka, a partition the instance consumes
// (protocol.Route). ok is false when the command goes by task id.
type CommandRouter interface {
	RouteCommand(agent, instance, topic string, now time.Time) (route *protocol.Route, ok bool)
}

// TaskStarter records a new task together with the first decisions for
// it, in one append (Scheduler.Start); ErrNotStarted means the caller must
// record the submission alone.
type TaskStarter interface {
	Start(ctx context.Context, id string, meta domain.EventMetadata, submitted ...domain.Event) error
}

// AgentDirectory knows the agent instances that announce themselves with
// heartbeats (port.AgentDirectory).
type AgentDirectory = port.AgentDirectory

// Heartbeats announce agent instances (port.Heartbeats).
type Heartbeats = port.Heartbeats

// ReplySender delivers agents' replies to the scheduler (port.ReplySender).
type ReplySender = port.ReplySender

// ReplySenderFunc is a ReplySender that is a function.
type ReplySenderFunc = port.ReplySenderFunc

// DeadLetters keeps messages that cannot be processed (port.DeadLetters).
type DeadLetters = port.DeadLetters

// Clock tells the time and makes the timers the processes wait on
// (port.Clock).
type Clock = port.Clock

// Timer is a one-shot timer of a Clock (port.Timer).
type Timer = port.Timer

// SystemClock is the wall clock, with the runtime's timers.
var SystemClock = port.SystemClock

// ClockFunc is a Clock that tells the time with now (port.ClockFunc).
func ClockFunc(now func() time.Time) Clock { return port.ClockFunc(now) }

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

// Candidacy is a Leadership an instance can withdraw from, so that another
// instance leads, and stand for again; it tells one tenure of the lease
// from the next.
type Candidacy interface {
	Leadership
	// Tenure numbers this instance's holdings of the lease: it changes
	// each time the instance is given the lease anew.
	Tenure() uint64
	// StandDown leaves the election until StandAgain: the instance stops
	// leading at once and another may take the lease. It does not wait.
	StandDown()
	// StandAgain takes part in the election again after StandDown.
	StandAgain()
}

// LeaseTerms number the leaderships of supervisors: their fencing tokens.
type LeaseTerms interface {
	// BeginTerm records that actor took the lease at at and returns the
	// term it acts in: larger than every term begun before, by any
	// instance.
	BeginTerm(ctx context.Context, actor string, at time.Time) (int64, error)
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
