package domain

import (
	"strconv"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrStaleReply is returned for a reply that does not answer the attempt in
// flight: a late reply after a retry, a reply for a finished step or task, or
// a duplicate. It changes nothing and is counted, not treated as a fault.
var ErrStaleReply = errors.New("stale reply")

// ErrUnknownStep is returned for a reply naming a step the task does not have.
var ErrUnknownStep = errors.New("unknown step")

// ErrTaskNotFound is returned when a trigger names a task never submitted.
var ErrTaskNotFound = errors.New("task not found")

// Decision carries what a decision needs besides the task: the time and the
// instance deciding.
type Decision struct {
	Now time.Time
	// Actor is the deciding instance; it becomes the LockedBy of dispatches.
	Actor string
}

// IdempotencyKey is the key an agent passes to its remote service for a
// step of a task. It is the same for every attempt.
func IdempotencyKey(taskID, step string) string { return taskID + "/" + step }

// Submit turns a valid order into the event that starts its task.
func Submit(order OrderPlaced, wf *Workflow, now time.Time) TaskSubmitted {
	return TaskSubmitted{
		TaskID: order.OrderID, Workflow: wf.Name, Steps: wf.StepNames(),
		ReplyTo: order.ReplyTo, Order: order.Raw, SubmittedAt: now,
	}
}

// Next decides what the task needs now that nothing is in flight: dispatch
// the first unfinished step (again, after a transient failure with attempts
// left), finish the task, or fail it. It returns no events while a step is
// in flight or once the task is terminal.
func (t *Task) Next(wf *Workflow, d Decision) []Event {
	if !t.Exists() || t.State.Terminal() {
		return nil
	}
	for _, s := range t.Steps {
		switch s.State {
		case StepProcessed:
			continue
		case StepProcessing:
			return nil
		case StepPending:
			return []Event{t.dispatch(wf, s, d)}
		case StepError:
			def, ok := wf.Step(s.Name)
			if !ok {
				return []Event{TaskFailed{TaskID: t.ID, Step: s.Name, Reason: "step " + s.Name + " is not in workflow " + wf.Name, At: d.Now}}
			}
			if s.LastFailure == FailureTransient && s.Attempt < def.MaxAttempts {
				return []Event{t.dispatch(wf, s, d)}
			}
			return []Event{TaskFailed{TaskID: t.ID, Step: s.Name, Reason: failureReason(s, def), At: d.Now}}
		}
	}
	return []Event{TaskProcessed{TaskID: t.ID, At: d.Now}}
}

func failureReason(s *Step, def *StepDefinition) string {
	if s.LastFailure == FailurePermanent {
		return "step " + s.Name + " failed permanently: " + s.LastError
	}
	return "step " + s.Name + " failed after " + strconv.Itoa(s.Attempt) + " of " + strconv.Itoa(def.MaxAttempts) + " attempts: " + s.LastError
}

func (t *Task) dispatch(wf *Workflow, s *Step, d Decision) Event {
	def, ok := wf.Step(s.Name)
	if !ok {
		return TaskFailed{TaskID: t.ID, Step: s.Name, Reason: "step " + s.Name + " is not in workflow " + wf.Name, At: d.Now}
	}
	return StepDispatched{
		TaskID: t.ID, Step: s.Name, Agent: def.Agent, Attempt: s.Attempt + 1,
		CompleteBy: d.Now.Add(def.Budget), LockedBy: d.Actor,
		IdempotencyKey: IdempotencyKey(t.ID, s.Name), DispatchedAt: d.Now,
	}
}

// RecordReply decides what an agent's reply does: it records the outcome of
// the attempt in flight and continues the task in the same decision. A reply
// for anything but the attempt in flight is ErrStaleReply.
func (t *Task) RecordReply(wf *Workflow, r StepReply, d Decision) ([]Event, error) {
	if !t.Exists() {
		return nil, errors.Wrapf(ErrTaskNotFound, "%q", r.TaskID)
	}
	s := t.Step(r.Step)
	if s == nil {
		return nil, errors.Wrapf(ErrUnknownStep, "task %q has no step %q", t.ID, r.Step)
	}
	if t.State.Terminal() || s.State != StepProcessing || s.Attempt != r.Attempt {
		return nil, errors.Wrapf(ErrStaleReply, "task %q step %q attempt %d (in flight: %s attempt %d)", t.ID, r.Step, r.Attempt, s.State, s.Attempt)
	}
	var outcome Event
	if r.Outcome == OutcomeSucceeded {
		outcome = StepSucceeded{TaskID: t.ID, Step: r.Step, Attempt: r.Attempt, Result: r.Result, At: d.Now}
	} else {
		kind := r.Failure
		if kind != FailurePermanent {
			kind = FailureTransient
		}
		outcome = StepFailed{TaskID: t.ID, Step: r.Step, Attempt: r.Attempt, Failure: kind, Reason: r.Reason, At: d.Now}
	}
	after := t.Clone()
	after.Apply(outcome)
	return append([]Event{outcome}, after.Next(wf, d)...), nil
}
