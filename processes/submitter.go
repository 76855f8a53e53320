package processes

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/cockroachdb/errors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/internal/tracing"
)

// DefaultMaxOrderSize bounds an order message body: 960 KiB, so that the
// order's TaskSubmitted event (the body, the step names, the metadata)
// fits KurrentDB's default maximum append size of 1 MiB, which the
// embedded event store enforces too.
const DefaultMaxOrderSize = 1<<20 - 64<<10

// Submitter turns order messages into tasks: it appends TaskSubmitted to the
// order's new task stream. Invalid orders go to the dead letters with the
// reason. A duplicate order (its stream exists) is acknowledged and does not
// start a second task.
type Submitter struct {
	Store       EventStore
	DeadLetters DeadLetters
	Workflows   WorkflowSelector
	// Rejections, when set, tells the caller of a refused order through its
	// reply topic (a status "rejected"), besides the dead letter. It should
	// send only to reply topics that exist (the caller waits on its topic):
	// an order that is refused must not create one.
	Rejections StatusSink
	Actor      string
	Clock      Clock
	Logger     *slog.Logger
	// MaxOrderSize bounds an order's body; default DefaultMaxOrderSize.
	MaxOrderSize int
	// ReplyTopics says which topics an order may name as replyTo; the zero
	// value allows domain.DefaultReplyTopicPattern. Saga's own topics and
	// trigger topics are never allowed.
	ReplyTopics domain.ReplyTopicPolicy

	// Tasks creates the tasks; nil means NewTaskRepository(Store).
	Tasks domain.TaskRepository
	// Starter, when set, records each new task together with its first
	// decisions (the scheduler of the same process, Scheduler.Start); when
	// it does not take one (ErrNotStarted), Tasks creates it.
	Starter TaskStarter
	// Tracing starts the submission spans; nil means the global
	// TracerProvider.
	Tracing trace.TracerProvider
	// Intake, when set, is asked before each new task: it holds the order
	// back while the engine has as many unfinished tasks as it may
	// (UnfinishedLimit). Refused orders are dead-lettered without waiting.
	Intake IntakeGate

	accepted, duplicates, rejected atomic.Int64
}

func (s *Submitter) tasks() domain.TaskRepository {
	if s.Tasks == nil {
		return NewTaskRepository(s.Store)
	}
	return s.Tasks
}

// SubmitterStats counts what the submitter did.
type SubmitterStats struct{ Accepted, Duplicates, Rejected int64 }

// Stats returns the submitter's counters.
func (s *Submitter) Stats() SubmitterStats {
	return SubmitterStats{s.accepted.Load(), s.duplicates.Load(), s.rejected.Load()}
}

// HandleOrder processes one order message. It returns an error only when the
// message could be neither stored nor dead-lettered, so that the consumer
// retries it and nothing is lost. Its span (SpanSubmit) continues the
// caller's traceparent; the task records the span's context, so that
// everything done for the task continues it.
func (s *Submitter) HandleOrder(ctx context.Context, msg Inbound) (err error) {
	ctx, span := tracing.ConsumerSpan(ctx, tracing.Tracer(s.Tracing), SpanSubmit, msg)
	defer func() { tracing.EndSpan(span, err) }()
	outcome, err := s.handleOrder(ctx, msg)
	span.SetAttributes(AttrOutcome.String(outcome))
	return err
}

// Submission outcomes, as the submission span's saga.outcome tells them.
const (
	submitAccepted     = "accepted"
	submitDuplicate    = "duplicate"
	submitDeadLettered = "dead_lettered"
)

func (s *Submitter) handleOrder(ctx context.Context, msg Inbound) (string, error) {
	maxSize := s.MaxOrderSize
	if maxSize == 0 {
		maxSize = DefaultMaxOrderSize
	}
	doc, err := domain.ParseOrderDocument(msg.Value, maxSize)
	if err != nil {
		return submitDeadLettered, s.reject(ctx, msg, "", err)
	}
	wf, err := s.Workflows.Select(ctx, msg.Topic, doc, msg.Headers.Get(protocol.HeaderType))
	if err != nil {
		if errors.Is(err, domain.ErrUnknownWorkflow) || errors.Is(err, domain.ErrInvalidMessage) {
			return submitDeadLettered, s.reject(ctx, msg, s.allowedReplyTo(ctx, msg, nil, doc.ReplyTo(domain.Trigger{})), err)
		}
		return "", errors.Wrap(err, "choose the workflow of an order")
	}
	order, err := doc.Order(wf, msg.Key)
	if err != nil {
		return submitDeadLettered, s.reject(ctx, msg, s.allowedReplyTo(ctx, msg, wf, doc.ReplyTo(wf.Trigger)), err)
	}
	if order.ReplyTo != "" {
		if err := s.ReplyTopics.Check(order.ReplyTo, s.triggerTopics(ctx, msg, wf)); err != nil {
			// No rejection status either: it would go to that topic.
			return submitDeadLettered, s.reject(ctx, msg, "", err)
		}
	}
	tracing.SetAttributes(trace.SpanFromContext(ctx), func() []attribute.KeyValue {
		return []attribute.KeyValue{AttrTaskID.String(order.ID), AttrWorkflow.String(wf.Name), AttrWorkflowVersion.Int(wf.Version)}
	})
	tp, recorded := tracing.RecordedTraceParent(ctx)
	if !recorded {
		// Tracing is off: the caller's trace context as it came, if it
		// can be trusted; a missing, malformed or oversized one is never
		// stored.
		if tp = msg.Headers.Get(protocol.HeaderTraceParent); !ValidTraceParent(tp) {
			tp = NewTraceParent()
		}
	}
	submitted := domain.Submit(order, wf, tp, s.Clock.Now())
	meta := domain.EventMetadata{CausationID: causation(msg), Actor: s.Actor, TraceParent: tp}
	if s.Intake != nil {
		release, err := s.Intake.AwaitRoom(ctx)
		if err != nil {
			return "", errors.Wrapf(err, "order %s waits for room", order.ID)
		}
		defer release()
	}
	err = s.create(ctx, order.ID, meta, submitted)
	switch {
	case errors.Is(err, domain.ErrTaskExists):
		s.duplicates.Add(1)
		tracing.TaskLogger(ctx, s.Logger, order.ID).Info("duplicate order acknowledged", "source", msg.Source())
		return submitDuplicate, nil
	case errors.Is(err, domain.ErrAppendRefused):
		// Retrying cannot help (too large, invalid): the record must not
		// hold up the orders after it.
		return submitDeadLettered, s.reject(ctx, msg, order.ReplyTo, err)
	case err != nil:
		return "", errors.Wrapf(err, "submit order %s", order.ID)
	}
	s.accepted.Add(1)
	return submitAccepted, nil
}

// create records a new task: through Starter when it takes it, else
// through Tasks.
func (s *Submitter) create(ctx context.Context, id string, meta domain.EventMetadata, submitted domain.TaskSubmitted) error {
	if s.Starter != nil {
		err := s.Starter.Start(ctx, id, meta, submitted)
		if !errors.Is(err, ErrNotStarted) {
			return err
		}
	}
	return s.tasks().Create(ctx, id, meta, submitted)
}

// TopicLister lists the topics that start tasks (Registry.Topics); a
// WorkflowSelector that is one lets the submitter forbid them all as reply
// topics, not only the order's own.
type TopicLister interface {
	Topics(ctx context.Context) ([]string, error)
}

// triggerTopics lists the topics a reply topic must not be: the one the
// order came from, its workflow's, and every registered workflow's.
func (s *Submitter) triggerTopics(ctx context.Context, msg Inbound, wf *domain.Workflow) []string {
	topics := []string{msg.Topic}
	if wf != nil {
		topics = append(topics, wf.Trigger.TopicsOrDefault()...)
	}
	if lister, ok := s.Workflows.(TopicLister); ok {
		if all, err := lister.Topics(ctx); err == nil {
			topics = append(topics, all...)
		}
	}
	return topics
}

// allowedReplyTo returns topic if a rejection may be sent there, else "".
func (s *Submitter) allowedReplyTo(ctx context.Context, msg Inbound, wf *domain.Workflow, topic string) string {
	if topic == "" || s.ReplyTopics.Check(topic, s.triggerTopics(ctx, msg, wf)) != nil {
		return ""
	}
	return topic
}

// reject dead-letters an order that cannot become a task and, when it names
// a reply topic, tells the caller there at once.
func (s *Submitter) reject(ctx context.Context, msg Inbound, replyTo string, reason error) error {
	s.rejected.Add(1)
	tracing.FailSpan(trace.SpanFromContext(ctx), reason)
	s.Logger.Warn("order rejected to dead letters", "source", msg.Source(), "reason", reason.Error())
	if err := s.DeadLetters.DeadLetter(ctx, msg, reason.Error()); err != nil {
		return errors.Wrap(err, "dead-letter rejected order")
	}
	if s.Rejections == nil || replyTo == "" {
		return nil
	}
	id := msg.Key
	if doc, err := domain.ParseOrderDocument(msg.Value, 0); err == nil {
		if v, ok := doc.Lookup(domain.DefaultIDField); ok {
			if text, isText := v.(string); isText {
				id = text
			}
		}
	}
	s.Rejections.PublishStatus(ctx, protocol.TaskStatus{OrderID: id, Status: protocol.StatusRejected, Reason: truncateReason(reason.Error()),
		Time: s.Clock.Now(), ReplyTo: replyTo, TraceParent: tracing.OutgoingTraceParent(ctx, msg.Headers.Get(protocol.HeaderTraceParent))})
	err := s.Rejections.Flush(ctx)
	if forgetter, ok := s.Rejections.(ReplyTopicForgetter); ok && err == nil {
		// Nothing else goes there: the sink need not know the topic.
		forgetter.ForgetReplyTopics([]string{replyTo})
	}
	return errors.Wrap(err, "tell the caller of a rejected order")
}

// maxCausationID bounds a CloudEvents id kept as a causation id.
const maxCausationID = 256

// causation is the id of the message that caused an event: its CloudEvents
// id when it has one of at most maxCausationID bytes, else its place in the
// log.
func causation(msg Inbound) string {
	if id := msg.Headers.Get(protocol.HeaderID); id != "" && len(id) <= maxCausationID {
		return id
	}
	return msg.Source()
}

// maxReason bounds a reason sent to a caller.
const maxReason = 1024

func truncateReason(r string) string {
	if len(r) > maxReason {
		return domain.CutUTF8(r, maxReason) + "…"
	}
	return r
}
