package processes

import (
	"context"
	"math/rand/v2"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
)

// Operator carries out operators' actions on tasks: retry a task in Error,
// or cancel a task (it compensates). It records the request; the scheduler
// dispatches what follows.
type Operator struct {
	Store     EventStore
	Workflows Workflows
	Clock     Clock
}

// Retry resubmits the failed step, or the failed compensation, of a task in
// Error; step may be empty to mean the one that failed.
func (o *Operator) Retry(ctx context.Context, taskID, step, by string) error {
	return o.act(ctx, taskID, by, func(t *domain.Task, wf *domain.Workflow, d domain.Decision) ([]domain.Event, error) {
		return t.Resubmit(wf, step, by, d)
	})
}

// Cancel stops a task and compensates what it did.
func (o *Operator) Cancel(ctx context.Context, taskID, by, reason string) error {
	return o.act(ctx, taskID, by, func(t *domain.Task, wf *domain.Workflow, d domain.Decision) ([]domain.Event, error) {
		return t.Cancel(wf, by, reason, d)
	})
}

// act loads the task, decides and appends on the revision it decided on,
// deciding again after a conflict.
func (o *Operator) act(ctx context.Context, taskID, by string, decide func(*domain.Task, *domain.Workflow, domain.Decision) ([]domain.Event, error)) error {
	if by == "" {
		return errors.New("an operator action must say who does it")
	}
	for i := 0; i < maxConflicts; i++ {
		recorded, err := o.Store.ReadStream(ctx, domain.TaskStream(taskID))
		if err != nil {
			return err
		}
		t := domain.NewTask(taskID)
		for _, r := range recorded {
			ev, err := domain.DecodeEvent(r.Type, r.Data)
			if err != nil {
				return errors.Wrapf(err, "task %s revision %d", taskID, r.Revision)
			}
			t.Apply(ev)
		}
		if !t.Exists() {
			return errors.Wrapf(domain.ErrTaskNotFound, "%q", taskID)
		}
		wf, err := o.Workflows.Workflow(ctx, t.Workflow, t.WorkflowVersion)
		if err != nil {
			return err
		}
		events, err := decide(t, wf, domain.Decision{Now: o.Clock(), Actor: by, Random: rand.Float64()})
		if err != nil {
			return err
		}
		batch, err := toNewEvents(events, domain.EventMetadata{CorrelationID: taskID, CausationID: "operator/" + by, Actor: "operator/" + by})
		if err != nil {
			return err
		}
		_, err = o.Store.Append(ctx, domain.TaskStream(taskID), domain.ExpectAfter(t.Revision), batch...)
		if !errors.Is(err, domain.ErrConcurrencyConflict) {
			return err
		}
	}
	return errors.Newf("task %s kept changing; try again", taskID)
}
