package protocol

import (
	"encoding/json"
	"time"

	"github.com/sagaengine/saga/domain"
)

// TaskView is a task as saga's HTTP API shows it (GET /api/tasks/{id}, and
// every task of GET /api/tasks as its Summary): the state folded from its
// events, per step its execution and compensation, without the order's
// body.
// docs/task.schema.json is its schema; like the messages, it only grows.
// The task view (a read model) stores each task as this JSON and the API
// passes it on as stored.
type TaskView struct {
	ID       string `json:"id"`
	Workflow string `json:"workflow"`
	// WorkflowVersion is the version of the workflow the task runs.
	WorkflowVersion int              `json:"workflowVersion"`
	State           domain.TaskState `json:"state"`
	Steps           []*StepView      `json:"steps"`
	// Priority is the task's priority: high, normal or low; absent in rows
	// stored before priorities, which are normal.
	Priority domain.Priority `json:"priority,omitempty"`
	// ReplyTo is the topic that receives the task's statuses.
	ReplyTo string `json:"replyTo,omitempty"`
	// Reason says why the task compensates or stopped in Error.
	Reason string `json:"reason,omitempty"`
	// FailedStep names the step whose failure made the task compensate,
	// or whose failure or failed compensation put it in Error.
	FailedStep string `json:"failedStep,omitempty"`
	// Compensating is set once the task is being undone.
	Compensating bool   `json:"compensating,omitempty"`
	CancelledBy  string `json:"cancelledBy,omitempty"`
	TraceParent  string `json:"traceparent,omitempty"`
	// LeaseTerm is the newest supervisor lease term recorded in the
	// task's stream; absent when none is.
	LeaseTerm int64 `json:"leaseTerm,omitempty"`
	// Revision is the revision of the last event folded in.
	Revision    int64     `json:"revision"`
	SubmittedAt time.Time `json:"submittedAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

// StepView is a step of a TaskView: its execution (the embedded LegView,
// whose State is the step's state) and, once it is being undone, its
// compensation.
type StepView struct {
	Name  string `json:"name"`
	Agent string `json:"agent,omitempty"`
	LegView
	// Result is what the step's agent returned when it succeeded. A list of
	// tasks (GET /api/tasks) leaves it out and says its size in
	// ResultBytes; GET /api/tasks/{id} carries it.
	Result json.RawMessage `json:"result,omitempty"`
	// ResultBytes, in a list of tasks, is the size of the Result left out.
	ResultBytes  int      `json:"resultBytes,omitempty"`
	Compensation *LegView `json:"compensation,omitempty"`
	// EndedRevision is the revision of the event that last ended an
	// attempt of the step (it succeeded, failed or timed out): steps are
	// compensated in the reverse order of it.
	EndedRevision int64 `json:"endedRevision,omitempty"`
	// Awaiting is what an await step waits for (the topic, the correlation
	// value, and until when), while its state is Awaiting.
	Awaiting *domain.AwaitingFor `json:"awaiting,omitempty"`
	// DelayedUntil is, for a delay step that started, the time it waits
	// (state Delayed) or waited until.
	DelayedUntil *time.Time `json:"delayedUntil,omitempty"`
}

// LegView is the progress of a step's execution or of its compensation.
type LegView struct {
	State        domain.StepState `json:"state"`
	Attempt      int              `json:"attempt"`
	LockedBy     string           `json:"lockedBy,omitempty"`
	CompleteBy   *time.Time       `json:"completeBy,omitempty"`
	NotBefore    *time.Time       `json:"notBefore,omitempty"`
	FailureCount int              `json:"failureCount"`
	// LastFailure and LastError say how and why the last attempt failed.
	LastFailure    domain.FailureKind `json:"lastFailure,omitempty"`
	LastError      string             `json:"lastError,omitempty"`
	IdempotencyKey string             `json:"idempotencyKey,omitempty"`
	// DispatchedAt is when the last attempt was dispatched.
	DispatchedAt *time.Time `json:"dispatchedAt,omitempty"`
	// AttemptBase is the attempt number when an operator last resubmitted;
	// only attempts after it count against the limit.
	AttemptBase int `json:"attemptBase,omitempty"`
	// WaitingSince is when the leg began to wait for room at its agent;
	// WaitReason says why.
	WaitingSince *time.Time `json:"waitingSince,omitempty"`
	WaitReason   string     `json:"waitReason,omitempty"`
	// Tries counts the calls to the service all attempts made, as agents
	// reported them.
	Tries int `json:"tries,omitempty"`
	// Returned counts the attempts agents gave back without calling;
	// LastReturn says why the last one was.
	Returned   int    `json:"returned,omitempty"`
	LastReturn string `json:"lastReturn,omitempty"`
	// Instance names the agent instance that answered last.
	Instance string `json:"instance,omitempty"`
}

// Summary is the task as a list shows it: the steps' results left out
// (each step's ResultBytes says how large it was), so that a page's size
// is bounded by its tasks' steps, not by what agents returned. It shares
// nothing mutable with v but the times.
func (v *TaskView) Summary() *TaskView {
	s := *v
	if v.Steps != nil {
		s.Steps = make([]*StepView, len(v.Steps))
	}
	for i, step := range v.Steps {
		c := *step
		c.ResultBytes, c.Result = len(step.Result), nil
		s.Steps[i] = &c
	}
	return &s
}

// TaskList is the answer of GET /api/tasks: a page of tasks, newest
// submission first, each its Summary (without the steps' results).
type TaskList struct {
	Tasks []*TaskView `json:"tasks"`
	// Count is the number of tasks on this page.
	Count int `json:"count"`
	// NextCursor, when set, continues with the next page (?cursor=).
	NextCursor string `json:"nextCursor,omitempty"`
	// Counts are the numbers of tasks in each state, over all tasks.
	Counts map[domain.TaskState]int `json:"counts"`
}

// ViewOf is the view of a task's state. It shares only the steps' results
// with t, which neither changes.
func ViewOf(t *domain.Task) *TaskView {
	v := &TaskView{ID: t.ID, Workflow: t.Workflow, WorkflowVersion: t.WorkflowVersion, State: t.State, Priority: t.Priority,
		ReplyTo: t.ReplyTo, Reason: t.Reason, FailedStep: t.FailedStep, Compensating: t.Compensating,
		CancelledBy: t.CancelledBy, TraceParent: t.TraceParent, Revision: t.Revision, SubmittedAt: t.SubmittedAt, UpdatedAt: t.UpdatedAt}
	v.LeaseTerm = t.LeaseTerm
	if t.Steps != nil {
		v.Steps = make([]*StepView, len(t.Steps))
	}
	for i, s := range t.Steps {
		v.Steps[i] = &StepView{Name: s.Name, Agent: s.Agent, LegView: legView(&s.Leg), Result: s.Result, EndedRevision: s.Ended,
			Awaiting: clonePtr(s.Awaiting), DelayedUntil: clonePtr(s.DelayedUntil)}
		if s.Compensation != nil {
			c := legView(s.Compensation)
			v.Steps[i].Compensation = &c
		}
	}
	return v
}

// Task is the state the view shows, for folding further events into it
// (the task view does) or asking it what a domain.Task answers. Order is
// empty: the view does not carry the order's body.
func (v *TaskView) Task() *domain.Task {
	t := &domain.Task{ID: v.ID, Workflow: v.Workflow, WorkflowVersion: v.WorkflowVersion, State: v.State, Priority: v.Priority.OrNormal(),
		ReplyTo: v.ReplyTo, Reason: v.Reason, FailedStep: v.FailedStep, Compensating: v.Compensating,
		CancelledBy: v.CancelledBy, TraceParent: v.TraceParent, Revision: v.Revision, SubmittedAt: v.SubmittedAt, UpdatedAt: v.UpdatedAt}
	t.LeaseTerm = v.LeaseTerm
	if v.Steps != nil {
		t.Steps = make([]*domain.Step, len(v.Steps))
	}
	for i, s := range v.Steps {
		t.Steps[i] = &domain.Step{Name: s.Name, Agent: s.Agent, Leg: s.LegView.leg(), Result: s.Result, Ended: s.EndedRevision,
			Awaiting: clonePtr(s.Awaiting), DelayedUntil: clonePtr(s.DelayedUntil)}
		if s.Compensation != nil {
			c := s.Compensation.leg()
			t.Steps[i].Compensation = &c
		}
	}
	return t
}

func legView(l *domain.Leg) LegView {
	return LegView{State: l.State, Attempt: l.Attempt, LockedBy: l.LockedBy, CompleteBy: clonePtr(l.CompleteBy), NotBefore: clonePtr(l.NotBefore),
		FailureCount: l.FailureCount, LastFailure: l.LastFailure, LastError: l.LastError, IdempotencyKey: l.IdempotencyKey, AttemptBase: l.AttemptBase,
		DispatchedAt: timePtr(l.DispatchedAt), WaitingSince: clonePtr(l.WaitingSince), WaitReason: l.WaitReason, Tries: l.Tries,
		Returned: l.Returned, LastReturn: l.LastReturn, Instance: l.Instance}
}

func (l LegView) leg() domain.Leg {
	return domain.Leg{State: l.State, Attempt: l.Attempt, LockedBy: l.LockedBy, CompleteBy: clonePtr(l.CompleteBy), NotBefore: clonePtr(l.NotBefore),
		FailureCount: l.FailureCount, LastFailure: l.LastFailure, LastError: l.LastError, IdempotencyKey: l.IdempotencyKey, AttemptBase: l.AttemptBase,
		DispatchedAt: timeOf(l.DispatchedAt), WaitingSince: clonePtr(l.WaitingSince), WaitReason: l.WaitReason, Tries: l.Tries,
		Returned: l.Returned, LastReturn: l.LastReturn, Instance: l.Instance}
}

// timePtr is t, nil when zero.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// timeOf is *p, zero when nil.
func timeOf(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return *p
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
