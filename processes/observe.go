package processes

import (
	"time"

	"github.com/sagaengine/saga/domain"
)

// Observer hears what the processes measure, so that an adapter can keep
// metrics of it (adapters/metrics keeps Prometheus histograms); the
// processes depend on no metrics library. Its methods are called on the
// processes' hot paths, from many goroutines: they must be cheap and safe
// for concurrent use. A nil Observer observes nothing.
type Observer interface {
	// TaskFinished is called by the instance whose append took a task to
	// a final state (Processed, Compensated, or Error), once per such
	// append, with the time from the order's submission to that state. A
	// task an operator retries from Error is observed again when it ends.
	TaskFinished(workflow string, state domain.TaskState, took time.Duration)
	// StepAnswered is called when the scheduler records an agent's reply
	// for the attempt in flight, with the time from the attempt's dispatch
	// to the recording. action is protocol.ActionExecute or
	// ActionCompensate, outcome protocol.OutcomeSucceeded or OutcomeFailed.
	StepAnswered(agent, action, outcome string, took time.Duration)
}

// taskFinished tells o, when set, that an append took t from a running
// state (wasFinal false) to a final one.
func taskFinished(o Observer, t *domain.Task, wasFinal bool) {
	if o == nil || wasFinal || !t.State.Terminal() {
		return
	}
	o.TaskFinished(t.Workflow, t.State, t.UpdatedAt.Sub(t.SubmittedAt))
}

// legOf returns the execution or compensation leg of a task's step, nil
// when there is none.
func legOf(t *domain.Task, step string, compensation bool) *domain.Leg {
	s := t.Step(step)
	switch {
	case s == nil:
		return nil
	case compensation:
		return s.Compensation
	}
	return &s.Leg
}
