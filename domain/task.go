package domain

import (
	"encoding/json"
	"time"
)

// TaskState is where a task stands as a whole.
type TaskState string

// The task states. Processed, Error and Compensated are terminal.
const (
	StatePending      TaskState = "Pending"
	StateProcessing   TaskState = "Processing"
	StateProcessed    TaskState = "Processed"
	StateError        TaskState = "Error"
	StateCompensating TaskState = "Compensating"
	StateCompensated  TaskState = "Compensated"
)

// Terminal reports whether no further transition may happen.
func (s TaskState) Terminal() bool {
	return s == StateProcessed || s == StateError || s == StateCompensated
}

// ParseTaskState accepts a state name as written by String.
func ParseTaskState(s string) (TaskState, bool) {
	switch st := TaskState(s); st {
	case StatePending, StateProcessing, StateProcessed, StateError, StateCompensating, StateCompensated:
		return st, true
	}
	return "", false
}

// StepState is where one step stands.
type StepState string

// The step states.
const (
	StepPending    StepState = "Pending"
	StepProcessing StepState = "Processing"
	StepProcessed  StepState = "Processed"
	StepError      StepState = "Error"
)

// FailureKind says whether retrying may help.
type FailureKind string

// The failure kinds.
const (
	FailureTransient FailureKind = "transient"
	FailurePermanent FailureKind = "permanent"
)

// Step is the current state of one step of a task.
type Step struct {
	Name           string      `json:"name"`
	Agent          string      `json:"agent,omitempty"`
	State          StepState   `json:"state"`
	Attempt        int         `json:"attempt"`
	LockedBy       string      `json:"lockedBy,omitempty"`
	CompleteBy     *time.Time  `json:"completeBy,omitempty"`
	FailureCount   int         `json:"failureCount"`
	IdempotencyKey string      `json:"idempotencyKey,omitempty"`
	LastFailure    FailureKind `json:"lastFailure,omitempty"`
	LastError      string      `json:"lastError,omitempty"`
}

// Task is the state of a task, folded from its events.
type Task struct {
	ID       string          `json:"id"`
	Workflow string          `json:"workflow"`
	State    TaskState       `json:"state"`
	Steps    []*Step         `json:"steps"`
	ReplyTo  string          `json:"replyTo,omitempty"`
	Order    json.RawMessage `json:"-"`
	Reason   string          `json:"reason,omitempty"`
	// Revision is the revision of the last event folded, -1 for none.
	Revision    int64     `json:"revision"`
	SubmittedAt time.Time `json:"submittedAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
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
		t.Workflow, t.ReplyTo, t.Order = e.Workflow, e.ReplyTo, e.Order
		t.State, t.SubmittedAt, t.UpdatedAt = StatePending, e.SubmittedAt, e.SubmittedAt
		t.Steps = make([]*Step, len(e.Steps))
		for i, name := range e.Steps {
			t.Steps[i] = &Step{Name: name, State: StepPending}
		}
	case StepDispatched:
		if s := t.Step(e.Step); s != nil {
			completeBy := e.CompleteBy
			s.State, s.Agent, s.Attempt, s.LockedBy = StepProcessing, e.Agent, e.Attempt, e.LockedBy
			s.CompleteBy, s.IdempotencyKey = &completeBy, e.IdempotencyKey
		}
		t.State, t.UpdatedAt = StateProcessing, e.DispatchedAt
	case StepSucceeded:
		if s := t.Step(e.Step); s != nil {
			s.State, s.CompleteBy = StepProcessed, nil
		}
		t.UpdatedAt = e.At
	case StepFailed:
		if s := t.Step(e.Step); s != nil {
			s.State, s.CompleteBy = StepError, nil
			s.FailureCount++
			s.LastFailure, s.LastError = e.Failure, e.Reason
		}
		t.UpdatedAt = e.At
	case TaskProcessed:
		t.State, t.UpdatedAt = StateProcessed, e.At
	case TaskFailed:
		t.State, t.Reason, t.UpdatedAt = StateError, e.Reason, e.At
	}
}

// Clone returns a deep copy, so a decision can fold tentatively.
func (t *Task) Clone() *Task {
	c := *t
	c.Steps = make([]*Step, len(t.Steps))
	for i, s := range t.Steps {
		cs := *s
		c.Steps[i] = &cs
	}
	return &c
}
