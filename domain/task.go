package domain

import (
	"encoding/json"
	"time"
)

// TaskState is where a task stands as a whole.
type TaskState string

// The task states. Processed and Compensated are final; Error waits for an
// operator, who may retry or cancel.
const (
	StatePending      TaskState = "Pending"
	StateProcessing   TaskState = "Processing"
	StateProcessed    TaskState = "Processed"
	StateError        TaskState = "Error"
	StateCompensating TaskState = "Compensating"
	StateCompensated  TaskState = "Compensated"
)

// Terminal reports whether the task has stopped: it succeeded, was undone,
// or waits in Error for an operator.
func (s TaskState) Terminal() bool {
	return s == StateProcessed || s == StateError || s == StateCompensated
}

// ParseTaskState accepts a state name.
func ParseTaskState(s string) (TaskState, bool) {
	switch st := TaskState(s); st {
	case StatePending, StateProcessing, StateProcessed, StateError, StateCompensating, StateCompensated:
		return st, true
	}
	return "", false
}

// StepState is where a step, or its compensation, stands.
type StepState string

// The step states.
const (
	StepStatePending      StepState = "Pending"
	StepStateProcessing   StepState = "Processing"
	StepStateRetrying     StepState = "Retrying"
	StepStateProcessed    StepState = "Processed"
	StepStateError        StepState = "Error"
	StepStateCompensating StepState = "Compensating"
	StepStateCompensated  StepState = "Compensated"
	// StepStateSkipped is a step whose condition was false: it counts as
	// succeeded for the steps after it.
	StepStateSkipped StepState = "Skipped"
)

// FailureKind says what went wrong with an attempt.
type FailureKind string

// The failure kinds. Transient failures and timeouts may be retried; after
// either the effect at the remote service is uncertain. A permanent failure
// means the service refused and nothing took effect.
const (
	FailureTransient FailureKind = "transient"
	FailurePermanent FailureKind = "permanent"
	FailureTimeout   FailureKind = "timeout"
)

// Leg is the progress of a step's execution or of its compensation.
type Leg struct {
	State          StepState
	Attempt        int
	LockedBy       string
	CompleteBy     *time.Time
	NotBefore      *time.Time
	FailureCount   int
	LastFailure    FailureKind
	LastError      string
	IdempotencyKey string
	// DispatchedAt is when the current attempt was dispatched; zero
	// before the first.
	DispatchedAt time.Time
	// AttemptBase is the attempt number when an operator last resubmitted;
	// only attempts after it count against the limit.
	AttemptBase int
	// WaitingSince is when the leg began to wait for room at its agent
	// (StepWaiting); nil when it is not waiting. WaitReason says why.
	WaitingSince *time.Time
	WaitReason   string
	// Tries counts the calls to the service that every attempt made, as
	// agents reported them.
	Tries int
	// Returned counts the attempts agents gave back without calling
	// (StepReturned); LastReturn says why the last one was.
	Returned   int
	LastReturn string
	// Instance names the agent instance the last attempt was sent to, or
	// that answered it, when known.
	Instance string
}

// InFlight reports whether an attempt was sent and not yet answered.
func (l *Leg) InFlight() bool { return l != nil && l.State == StepStateProcessing }

func (l *Leg) dispatched(attempt int, completeBy time.Time, lockedBy, key, instance string, at time.Time) {
	l.State, l.Attempt, l.LockedBy, l.IdempotencyKey, l.DispatchedAt, l.Instance = StepStateProcessing, attempt, lockedBy, key, at, instance
	l.CompleteBy, l.NotBefore = &completeBy, nil
	l.WaitingSince, l.WaitReason = nil, ""
}

// answered notes what the agent said of itself in a reply.
func (l *Leg) answered(a Answer) {
	l.Tries += a.Tries
	if a.Instance != "" {
		l.Instance = a.Instance
	}
}

// returned undoes the dispatch of an attempt an agent gave back: the leg is
// due again, with the attempt number it had before.
func (l *Leg) returned(e StepReturned) {
	if !l.InFlight() || l.Attempt != e.Attempt {
		return
	}
	l.State, l.Attempt, l.CompleteBy, l.NotBefore = StepStateRetrying, e.Attempt-1, nil, nil
	if e.NotBefore != nil {
		notBefore := *e.NotBefore
		l.NotBefore = &notBefore
	}
	l.Returned++
	l.LastReturn = e.Reason
	if e.Instance != "" {
		l.LastReturn = e.Instance + ": " + e.Reason
	}
}

func (l *Leg) failed(kind FailureKind, reason string) {
	l.State, l.CompleteBy = StepStateError, nil
	l.FailureCount++
	l.LastFailure, l.LastError = kind, reason
}

func (l *Leg) clone() *Leg {
	if l == nil {
		return nil
	}
	c := *l
	return &c
}

// Waiting reports whether the leg waits for room at its agent.
func (l *Leg) Waiting() bool { return l != nil && l.WaitingSince != nil }

// Step is the current state of one step of a task: its execution (the
// embedded Leg, whose State is the step's state) and, once it is being
// undone, its compensation.
type Step struct {
	Name  string
	Agent string
	Leg
	// Result is what the step's agent returned when it succeeded.
	Result       json.RawMessage
	Compensation *Leg
	// Ended is the revision of the event that last ended an attempt of
	// the step (it succeeded, failed or timed out); compensations go in
	// the reverse order of it. 0 before any ended.
	Ended int64
	// Awaiting is what an await step waits for, while it waits
	// (StepStateAwaiting); nil otherwise.
	Awaiting *AwaitingFor
	// DelayedUntil is, for a delay step that started, the time it waits
	// (or waited) until; nil otherwise.
	DelayedUntil *time.Time
}

// done reports whether the steps after this one may start: it succeeded
// or was skipped.
func (s *Step) done() bool { return s.State == StepStateProcessed || s.State == StepStateSkipped }

// mayHaveEffect reports whether the step may have changed something at its
// remote service and so must be compensated: it succeeded, or an attempt
// was sent and the last answer was not a permanent refusal.
func (s *Step) mayHaveEffect() bool {
	return s.State == StepStateProcessed || (s.Attempt > 0 && s.LastFailure != FailurePermanent)
}

// Task is the state of a task, folded from its events. It has no JSON
// form of its own: the HTTP API and the task view show it as a
// protocol.TaskView.
type Task struct {
	ID       string
	Workflow string
	// WorkflowVersion is the version of the workflow the task runs.
	WorkflowVersion int
	State           TaskState
	Steps           []*Step
	ReplyTo         string
	Order           json.RawMessage
	// Reason says why the task compensates or stopped in Error.
	Reason string
	// FailedStep names the step whose failure made the task compensate,
	// or whose failure or failed compensation put it in Error.
	FailedStep string
	// Compensating is set once the task is being undone; it stays set if a
	// compensation stops in Error, so a retry resumes the compensation.
	Compensating bool
	CancelledBy  string
	TraceParent  string
	// Priority is the task's priority; never empty once submitted.
	Priority Priority
	// LeaseTerm is the newest supervisor lease term recorded in the
	// task's stream (StepTimedOut.LeaseTerm); 0 for none.
	LeaseTerm int64
	// Revision is the revision of the last event folded, -1 for none.
	Revision    int64
	SubmittedAt time.Time
	UpdatedAt   time.Time
}

// NewTask returns the state of a task with no events.
func NewTask(id string) *Task { return &Task{ID: id, Revision: -1} }

// Exists reports whether the task was submitted.
func (t *Task) Exists() bool { return t.Revision >= 0 }

// Step returns the named step.
func (t *Task) Step(name string) *Step {
	for _, s := range t.Steps {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// leg returns the execution or compensation leg of the named step.
func (t *Task) leg(step string, compensation bool) *Leg {
	s := t.Step(step)
	switch {
	case s == nil:
		return nil
	case compensation:
		if s.Compensation == nil {
			s.Compensation = &Leg{State: StepStatePending}
		}
		return s.Compensation
	default:
		return &s.Leg
	}
}

// Fold applies events in order to a new task.
func Fold(id string, events []Event) *Task {
	t := NewTask(id)
	for _, e := range events {
		t.Apply(e)
	}
	return t
}

// Apply folds one event into the state and advances Revision by one. It
// never fails: decisions check validity before they emit events.
func (t *Task) Apply(e Event) {
	t.Revision++
	switch e := e.(type) {
	case TaskSubmitted:
		t.Workflow, t.ReplyTo, t.Order, t.TraceParent = e.Workflow, e.ReplyTo, e.Order, e.TraceParent
		t.WorkflowVersion = max(e.WorkflowVersion, 1)
		t.Priority = e.Priority.OrNormal()
		t.State, t.SubmittedAt, t.UpdatedAt = StatePending, e.SubmittedAt, e.SubmittedAt
		t.Steps = make([]*Step, len(e.Steps))
		for i, name := range e.Steps {
			t.Steps[i] = &Step{Name: name, Leg: Leg{State: StepStatePending}}
		}
	case StepDispatched:
		if s := t.Step(e.Step); s != nil {
			s.Agent = e.Agent
			s.dispatched(e.Attempt, e.CompleteBy, e.LockedBy, e.IdempotencyKey, e.Instance, e.DispatchedAt)
		}
		if !t.Compensating {
			t.State = StateProcessing
		}
		t.UpdatedAt = e.DispatchedAt
	case StepSucceeded:
		if s := t.Step(e.Step); s != nil {
			s.State, s.CompleteBy, s.Result, s.Ended, s.Awaiting = StepStateProcessed, nil, e.Result, t.Revision, nil
			s.answered(e.Answer)
		}
		t.UpdatedAt = e.At
	case StepFailed:
		if l := t.leg(e.Step, false); l != nil {
			l.failed(e.Failure, e.Reason)
			l.answered(e.Answer)
			t.Step(e.Step).Ended = t.Revision
			t.Step(e.Step).Awaiting = nil
		}
		t.UpdatedAt = e.At
	case StepWaiting:
		if l := t.leg(e.Step, e.Compensation); l != nil {
			at := e.At
			l.WaitingSince, l.WaitReason = &at, e.Reason
		}
		t.UpdatedAt = e.At
	case StepReturned:
		if l := t.leg(e.Step, e.Compensation); l != nil {
			l.returned(e)
		}
		t.UpdatedAt = e.At
	case StepTimedOut:
		if l := t.leg(e.Step, e.Compensation); l != nil {
			l.failed(FailureTimeout, "no reply before completeBy "+e.CompleteBy.Format(time.RFC3339Nano))
			if !e.Compensation {
				t.Step(e.Step).Ended = t.Revision
				t.Step(e.Step).Awaiting = nil
			}
		}
		t.LeaseTerm = max(t.LeaseTerm, e.LeaseTerm)
		t.UpdatedAt = e.At
	case StepRetryScheduled:
		if l := t.leg(e.Step, e.Compensation); l != nil {
			notBefore := e.NotBefore
			l.State, l.NotBefore = StepStateRetrying, &notBefore
		}
		t.UpdatedAt = e.At
	case CompensationRequested:
		t.Compensating, t.State, t.Reason, t.UpdatedAt = true, StateCompensating, e.Reason, e.At
		t.FailedStep = e.Step
		t.abandonAwaits()
		t.abandonDelays()
	case TaskCancelled:
		t.Compensating, t.State, t.CancelledBy, t.UpdatedAt = true, StateCompensating, e.By, e.At
		t.abandonAwaits()
		t.Reason = "cancelled by " + e.By
		if e.Reason != "" {
			t.Reason += ": " + e.Reason
		}
		t.abandonDelays()
	case CompensationDispatched:
		if s := t.Step(e.Step); s != nil {
			if s.Compensation == nil {
				s.Compensation = &Leg{}
			}
			s.State = StepStateCompensating
			s.Compensation.dispatched(e.Attempt, e.CompleteBy, e.LockedBy, e.IdempotencyKey, e.Instance, e.DispatchedAt)
		}
		t.State, t.UpdatedAt = StateCompensating, e.DispatchedAt
	case StepCompensated:
		if s := t.Step(e.Step); s != nil && s.Compensation != nil {
			s.State = StepStateCompensated
			s.Compensation.State, s.Compensation.CompleteBy = StepStateProcessed, nil
			s.Compensation.answered(e.Answer)
		}
		t.UpdatedAt = e.At
	case CompensationFailed:
		if l := t.leg(e.Step, true); l != nil {
			l.failed(e.Failure, e.Reason)
			l.answered(e.Answer)
		}
		t.UpdatedAt = e.At
	case StepResubmitted:
		if s := t.Step(e.Step); s != nil {
			l := t.leg(e.Step, e.Compensation)
			l.State, l.NotBefore, l.AttemptBase = StepStatePending, nil, l.Attempt
			if e.Compensation {
				s.State = StepStateCompensating
			}
		}
		t.State, t.Reason, t.FailedStep, t.UpdatedAt = StateProcessing, "", "", e.At
		if t.Compensating {
			t.State = StateCompensating
		}
	case StepSkipped:
		if s := t.Step(e.Step); s != nil {
			s.State, s.NotBefore = StepStateSkipped, nil
			s.WaitingSince, s.WaitReason = nil, ""
		}
		t.UpdatedAt = e.At
	case StepAwaiting:
		if s := t.Step(e.Step); s != nil {
			s.awaiting(e)
		}
		if !t.Compensating {
			t.State = StateProcessing
		}
		t.UpdatedAt = e.At
	case StepDelayed:
		t.applyDelayed(e)
	case StepDelayElapsed:
		t.applyDelayElapsed(e)
	case TaskProcessed:
		t.State, t.UpdatedAt = StateProcessed, e.At
	case TaskCompensated:
		t.State, t.UpdatedAt = StateCompensated, e.At
	case TaskFailed:
		t.State, t.Reason, t.FailedStep, t.UpdatedAt = StateError, e.Reason, e.Step, e.At
		if s := t.Step(e.Step); s != nil && t.Compensating && s.Compensation != nil {
			s.State = StepStateError
		}
	}
}

// Clone returns a deep copy, so a decision can fold tentatively.
func (t *Task) Clone() *Task {
	c := *t
	c.Steps = make([]*Step, len(t.Steps))
	for i, s := range t.Steps {
		cs := *s
		cs.Compensation = s.Compensation.clone()
		c.Steps[i] = &cs
	}
	return &c
}

// NextWake returns the earliest time a retry is due, if one is scheduled.
func (t *Task) NextWake() (time.Time, bool) {
	var wake time.Time
	for _, s := range t.Steps {
		for _, l := range []*Leg{&s.Leg, s.Compensation} {
			if l != nil && l.State == StepStateRetrying && l.NotBefore != nil && (wake.IsZero() || l.NotBefore.Before(wake)) {
				wake = *l.NotBefore
			}
		}
	}
	return wake, !wake.IsZero()
}

// InFlight lists the attempts sent and not yet answered.
func (t *Task) InFlight() []InFlightAttempt {
	var out []InFlightAttempt
	for _, s := range t.Steps {
		if s.InFlight() {
			out = append(out, InFlightAttempt{Step: s.Name, Agent: s.Agent, Instance: s.Instance, Attempt: s.Attempt, CompleteBy: *s.CompleteBy})
		}
		if s.Compensation.InFlight() {
			out = append(out, InFlightAttempt{Step: s.Name, Agent: s.Agent, Instance: s.Compensation.Instance, Compensation: true,
				Attempt: s.Compensation.Attempt, CompleteBy: *s.Compensation.CompleteBy})
		}
	}
	return out
}

// InFlightAttempt names one attempt in flight.
type InFlightAttempt struct {
	Step string
	// Agent is the step's agent; Instance the instance the attempt was
	// sent to, when the scheduler chose one.
	Agent, Instance string
	Compensation    bool
	Attempt         int
	CompleteBy      time.Time
}

// Results returns the results of the steps that succeeded, by step name,
// of the steps before the named one (all of them if before is empty).
func (t *Task) Results(before string) map[string]json.RawMessage {
	var out map[string]json.RawMessage
	for _, s := range t.Steps {
		if s.Name == before {
			break
		}
		if len(s.Result) > 0 {
			if out == nil {
				out = map[string]json.RawMessage{}
			}
			out[s.Name] = s.Result
		}
	}
	return out
}
