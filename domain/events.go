package domain

import (
	"encoding/json"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrUnknownEventType is returned when decoding an event type this version
// of saga does not know.
var ErrUnknownEventType = errors.New("unknown event type")

// Wire names of the task events. They are stored in the event store and must
// never change; a Go type may be renamed, its wire name may not.
const (
	// TaskSubmittedType records an accepted order and the steps it will run.
	TaskSubmittedType = "TaskSubmitted"
	// StepDispatchedType records that an attempt of a step was sent to its agent.
	StepDispatchedType = "StepDispatched"
	// StepSucceededType records an agent's success reply for an attempt.
	StepSucceededType = "StepSucceeded"
	// StepFailedType records an agent's failure reply for an attempt.
	StepFailedType = "StepFailed"
	// TaskProcessedType records that every step succeeded.
	TaskProcessedType = "TaskProcessed"
	// TaskFailedType records that the task stopped in Error.
	TaskFailedType = "TaskFailed"
	// StepTimedOutType records that an attempt passed its CompleteBy unanswered.
	StepTimedOutType = "StepTimedOut"
	// StepRetryScheduledType records that a step (or its compensation) will be
	// tried again, not before a time.
	StepRetryScheduledType = "StepRetryScheduled"
	// CompensationRequestedType records that the task will be undone.
	CompensationRequestedType = "CompensationRequested"
	// CompensationDispatchedType records that an attempt to undo a step was sent.
	CompensationDispatchedType = "CompensationDispatched"
	// StepCompensatedType records that a step was undone.
	StepCompensatedType = "StepCompensated"
	// CompensationFailedType records a failed attempt to undo a step.
	CompensationFailedType = "CompensationFailed"
	// TaskCompensatedType records that every step that needed it was undone.
	TaskCompensatedType = "TaskCompensated"
	// StepResubmittedType records an operator's retry of a failed step or
	// compensation.
	StepResubmittedType = "StepResubmitted"
	// TaskCancelledType records an operator's cancellation, which compensates.
	TaskCancelledType = "TaskCancelled"
	// StepWaitingType records that a step (or its compensation) is due but
	// waits for room at its agent.
	StepWaitingType = "StepWaiting"
	// StepReturnedType records that an agent instance gave an attempt back
	// without calling its service; the attempt does not count.
	StepReturnedType = "StepReturned"
	// StepSkippedType records that a step's condition was false: the step
	// counts as succeeded for the steps after it, is never called and never
	// compensated.
	StepSkippedType = "StepSkipped"
	// StepDelayedType records that a delay step waits until a time.
	StepDelayedType = "StepDelayed"
	// StepDelayElapsedType records that a delay step's time came: the step
	// succeeded.
	StepDelayElapsedType = "StepDelayElapsed"
)

// Event is a task event.
type Event interface {
	// EventType returns the event's wire name.
	EventType() string
}

// TaskSubmitted records an accepted order. It snapshots the workflow's step
// names, so a task folds the same even if the workflow changes later.
type TaskSubmitted struct {
	TaskID   string `json:"taskId"`
	Workflow string `json:"workflow"`
	// WorkflowVersion is the registered version the task runs to its end;
	// 0 in tasks recorded before workflows had versions, read as 1.
	WorkflowVersion int             `json:"workflowVersion,omitempty"`
	Steps           []string        `json:"steps"`
	ReplyTo         string          `json:"replyTo,omitempty"`
	Order           json.RawMessage `json:"order"`
	SubmittedAt     time.Time       `json:"submittedAt"`
	// TraceParent is the W3C trace context of the order; the task's
	// commands and status messages continue its trace.
	TraceParent string `json:"traceparent,omitempty"`
	// Priority is the task's priority, high or low; absent for normal,
	// and in tasks recorded before priorities, which read as normal.
	Priority Priority `json:"priority,omitempty"`
}

// StepDispatched records that an attempt was sent to an agent, which must
// answer before CompleteBy.
type StepDispatched struct {
	TaskID string `json:"taskId"`
	Step   string `json:"step"`
	Agent  string `json:"agent"`
	// Instance is the agent instance the scheduler chose, when it knew the
	// agent's instances (from their heartbeats).
	Instance       string    `json:"instance,omitempty"`
	Attempt        int       `json:"attempt"`
	CompleteBy     time.Time `json:"completeBy"`
	LockedBy       string    `json:"lockedBy"`
	IdempotencyKey string    `json:"idempotencyKey"`
	DispatchedAt   time.Time `json:"dispatchedAt"`
}

// StepSucceeded records an agent's success for an attempt.
type StepSucceeded struct {
	TaskID  string          `json:"taskId"`
	Step    string          `json:"step"`
	Attempt int             `json:"attempt"`
	Result  json.RawMessage `json:"result,omitempty"`
	At      time.Time       `json:"at"`
	Answer
}

// Answer is what an agent said of itself in a reply: the instance that
// answered and how many calls the attempt made. Both are absent for agents
// that do not say, and in events recorded before they could.
type Answer struct {
	Instance string `json:"instance,omitempty"`
	Tries    int    `json:"tries,omitempty"`
}

// StepFailed records an agent's failure for an attempt.
type StepFailed struct {
	TaskID  string      `json:"taskId"`
	Step    string      `json:"step"`
	Attempt int         `json:"attempt"`
	Failure FailureKind `json:"failure"`
	Reason  string      `json:"reason"`
	At      time.Time   `json:"at"`
	Answer
}

// TaskProcessed records that every step succeeded.
type TaskProcessed struct {
	TaskID string    `json:"taskId"`
	At     time.Time `json:"at"`
}

// TaskFailed records that the task stopped in Error.
type TaskFailed struct {
	TaskID string    `json:"taskId"`
	Step   string    `json:"step,omitempty"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// StepTimedOut records that an attempt passed its CompleteBy without a
// reply. DetectedBy names the supervisor.
type StepTimedOut struct {
	TaskID       string    `json:"taskId"`
	Step         string    `json:"step"`
	Compensation bool      `json:"compensation,omitempty"`
	Attempt      int       `json:"attempt"`
	FailureCount int       `json:"failureCount"`
	CompleteBy   time.Time `json:"completeBy"`
	DetectedBy   string    `json:"detectedBy"`
	At           time.Time `json:"at"`
	// LeaseTerm is the lease term (fencing token) of the supervisor that
	// detected the timeout (TimeOutInTerm); absent when it had none, and
	// in events recorded before terms.
	LeaseTerm int64 `json:"leaseTerm,omitempty"`
}

// StepRetryScheduled records that attempt Attempt of a step (or of its
// compensation) will be dispatched, not before NotBefore.
type StepRetryScheduled struct {
	TaskID       string    `json:"taskId"`
	Step         string    `json:"step"`
	Compensation bool      `json:"compensation,omitempty"`
	Attempt      int       `json:"attempt"`
	NotBefore    time.Time `json:"notBefore"`
	At           time.Time `json:"at"`
}

// CompensationRequested records that the task cannot finish and its steps
// will be undone in reverse order.
type CompensationRequested struct {
	TaskID      string    `json:"taskId"`
	Step        string    `json:"step,omitempty"`
	Reason      string    `json:"reason"`
	RequestedBy string    `json:"requestedBy"`
	At          time.Time `json:"at"`
}

// CompensationDispatched records that an attempt to undo a step was sent to
// its agent, which must answer before CompleteBy.
type CompensationDispatched struct {
	TaskID string `json:"taskId"`
	Step   string `json:"step"`
	Agent  string `json:"agent"`
	// Instance is the agent instance the scheduler chose, if any.
	Instance       string    `json:"instance,omitempty"`
	Action         string    `json:"action"`
	Attempt        int       `json:"attempt"`
	CompleteBy     time.Time `json:"completeBy"`
	LockedBy       string    `json:"lockedBy"`
	IdempotencyKey string    `json:"idempotencyKey"`
	DispatchedAt   time.Time `json:"dispatchedAt"`
}

// StepCompensated records that a step was undone.
type StepCompensated struct {
	TaskID  string    `json:"taskId"`
	Step    string    `json:"step"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Answer
}

// CompensationFailed records a failed attempt to undo a step.
type CompensationFailed struct {
	TaskID  string      `json:"taskId"`
	Step    string      `json:"step"`
	Attempt int         `json:"attempt"`
	Failure FailureKind `json:"failure"`
	Reason  string      `json:"reason"`
	At      time.Time   `json:"at"`
	Answer
}

// StepWaiting records that a step (or its compensation) is due but waits
// for room at its agent: its instances are at capacity, or none is
// healthy. It is recorded once per wait; the dispatch that ends the wait
// follows when room frees.
type StepWaiting struct {
	TaskID       string    `json:"taskId"`
	Step         string    `json:"step"`
	Compensation bool      `json:"compensation,omitempty"`
	Agent        string    `json:"agent"`
	Reason       string    `json:"reason"`
	At           time.Time `json:"at"`
}

// StepReturned records that an agent instance gave an attempt back without
// calling its service (its breaker was open, its calls hung, it was
// stopping). The attempt does not count: the step is dispatched again, with
// the same attempt number, to a healthy instance when there is one.
type StepReturned struct {
	TaskID       string `json:"taskId"`
	Step         string `json:"step"`
	Compensation bool   `json:"compensation,omitempty"`
	Attempt      int    `json:"attempt"`
	Instance     string `json:"instance,omitempty"`
	Reason       string `json:"reason"`
	// NotBefore, when set, is when the step may go again: no other
	// instance could take it when it was given back.
	NotBefore *time.Time `json:"notBefore,omitempty"`
	At        time.Time  `json:"at"`
}

// StepSkipped records that a step's condition (When) was false when the
// steps it waits for were done: the step counts as succeeded for the steps
// after it, and is never called nor compensated.
type StepSkipped struct {
	TaskID string `json:"taskId"`
	Step   string `json:"step"`
	// Condition is the condition that was false.
	Condition string    `json:"condition"`
	At        time.Time `json:"at"`
}

// StepDelayed records that a delay step started: it waits until Until,
// calling no agent.
type StepDelayed struct {
	TaskID string    `json:"taskId"`
	Step   string    `json:"step"`
	Until  time.Time `json:"until"`
	At     time.Time `json:"at"`
}

// StepDelayElapsed records that a delay step's time came (At is not
// before Until): the step succeeded. The supervisor that fired it records
// its name and lease term; the scheduler records one whose time had come
// when the step started.
type StepDelayElapsed struct {
	TaskID  string    `json:"taskId"`
	Step    string    `json:"step"`
	Until   time.Time `json:"until"`
	FiredBy string    `json:"firedBy,omitempty"`
	At      time.Time `json:"at"`
	// LeaseTerm is the lease term of the supervisor that fired it
	// (ElapseDelayInTerm); absent when it had none.
	LeaseTerm int64 `json:"leaseTerm,omitempty"`
}

// TaskCompensated records that every step that needed it was undone.
type TaskCompensated struct {
	TaskID string    `json:"taskId"`
	At     time.Time `json:"at"`
}

// StepResubmitted records an operator's retry of a failed step, or of its
// compensation; the attempt limit counts again from here.
type StepResubmitted struct {
	TaskID       string    `json:"taskId"`
	Step         string    `json:"step"`
	Compensation bool      `json:"compensation,omitempty"`
	By           string    `json:"by"`
	At           time.Time `json:"at"`
}

// TaskCancelled records an operator's cancellation; the task compensates.
type TaskCancelled struct {
	TaskID string    `json:"taskId"`
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// EventType implementations.
func (TaskSubmitted) EventType() string  { return TaskSubmittedType }
func (StepDispatched) EventType() string { return StepDispatchedType }
func (StepSucceeded) EventType() string  { return StepSucceededType }
func (StepFailed) EventType() string     { return StepFailedType }
func (TaskProcessed) EventType() string  { return TaskProcessedType }
func (TaskFailed) EventType() string     { return TaskFailedType }

func (StepTimedOut) EventType() string           { return StepTimedOutType }
func (StepRetryScheduled) EventType() string     { return StepRetryScheduledType }
func (CompensationRequested) EventType() string  { return CompensationRequestedType }
func (CompensationDispatched) EventType() string { return CompensationDispatchedType }
func (StepCompensated) EventType() string        { return StepCompensatedType }
func (CompensationFailed) EventType() string     { return CompensationFailedType }
func (TaskCompensated) EventType() string        { return TaskCompensatedType }
func (StepResubmitted) EventType() string        { return StepResubmittedType }
func (TaskCancelled) EventType() string          { return TaskCancelledType }
func (StepWaiting) EventType() string            { return StepWaitingType }
func (StepReturned) EventType() string           { return StepReturnedType }
func (StepSkipped) EventType() string            { return StepSkippedType }
func (StepDelayed) EventType() string            { return StepDelayedType }
func (StepDelayElapsed) EventType() string       { return StepDelayElapsedType }

// taskEvents registers every task event: its wire name and how to decode
// it. DecodeEvent reads it; a test checks that every registered event is
// also folded (Task.Apply), has a status (protocol.StatusOf) and is described in
// audits, so adding an event cannot miss one of them.
var taskEvents = []struct {
	name   string
	decode func([]byte) (Event, error)
}{
	{TaskSubmittedType, decodeAs[TaskSubmitted]},
	{StepDispatchedType, decodeAs[StepDispatched]},
	{StepSucceededType, decodeAs[StepSucceeded]},
	{StepFailedType, decodeAs[StepFailed]},
	{TaskProcessedType, decodeAs[TaskProcessed]},
	{TaskFailedType, decodeAs[TaskFailed]},
	{StepTimedOutType, decodeAs[StepTimedOut]},
	{StepRetryScheduledType, decodeAs[StepRetryScheduled]},
	{CompensationRequestedType, decodeAs[CompensationRequested]},
	{CompensationDispatchedType, decodeAs[CompensationDispatched]},
	{StepCompensatedType, decodeAs[StepCompensated]},
	{CompensationFailedType, decodeAs[CompensationFailed]},
	{TaskCompensatedType, decodeAs[TaskCompensated]},
	{StepResubmittedType, decodeAs[StepResubmitted]},
	{TaskCancelledType, decodeAs[TaskCancelled]},
	{StepWaitingType, decodeAs[StepWaiting]},
	{StepSkippedType, decodeAs[StepSkipped]},
	{StepReturnedType, decodeAs[StepReturned]},
	{StepAwaitingType, decodeAs[StepAwaiting]},
	{StepDelayedType, decodeAs[StepDelayed]},
	{StepDelayElapsedType, decodeAs[StepDelayElapsed]},
}

var decoders = func() map[string]func([]byte) (Event, error) {
	m := make(map[string]func([]byte) (Event, error), len(taskEvents))
	for _, e := range taskEvents {
		m[e.name] = e.decode
	}
	return m
}()

// TaskEventTypes lists the wire names of every task event.
func TaskEventTypes() []string {
	out := make([]string, len(taskEvents))
	for i, e := range taskEvents {
		out[i] = e.name
	}
	return out
}

// DecodeEvent decodes a stored event by its wire name.
func DecodeEvent(eventType string, data []byte) (Event, error) {
	if e, ok := decodeEventJSON(eventType, data); ok {
		return e, nil
	}
	decode, ok := decoders[eventType]
	if !ok {
		return nil, errors.Wrapf(ErrUnknownEventType, "%q", eventType)
	}
	e, err := decode(data)
	return e, errors.Wrapf(err, "decode %s", eventType)
}

func decodeAs[T Event](data []byte) (Event, error) {
	var v T
	err := json.Unmarshal(data, &v)
	return v, err
}

// EncodeEvent encodes an event for the store.
func EncodeEvent(e Event) ([]byte, error) {
	if b, ok := appendEventJSON(nil, e); ok {
		return b, nil
	}
	b, err := json.Marshal(e)
	return b, errors.Wrapf(err, "encode %s", e.EventType())
}
