package processes

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/cockroachdb/errors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes/internal/tracing"
)

// Operator carries out operators' actions on tasks: retry a task in Error,
// or cancel a task (it compensates). It records the request; the scheduler
// dispatches what follows.
type Operator struct {
	Store     EventStore
	Workflows Workflows
	Clock     Clock
	// Tasks decides on tasks; nil means NewTaskRepository(Store), with
	// Observer.
	Tasks domain.TaskRepository
	// Observer, when set, hears of the tasks an action finishes (a
	// cancelled task with nothing to undo).
	Observer Observer
	// Tracing records each action as a span (SpanOperator) in the task's
	// trace; nil means the global TracerProvider.
	Tracing trace.TracerProvider
}

// Retry resubmits the failed step, or the failed compensation, of a task in
// Error; step may be empty to mean the one that failed.
func (o *Operator) Retry(ctx context.Context, taskID, step, by string) error {
	return o.act(ctx, taskID, by, "retry", func(t *domain.Task, wf *domain.Workflow, d domain.Decision) ([]domain.Event, error) {
		return t.Resubmit(wf, step, by, d)
	})
}

// Cancel stops a task and compensates what it did.
func (o *Operator) Cancel(ctx context.Context, taskID, by, reason string) error {
	return o.act(ctx, taskID, by, "cancel", func(t *domain.Task, wf *domain.Workflow, d domain.Decision) ([]domain.Event, error) {
		return t.Cancel(wf, by, reason, d)
	})
}

// act decides through the task repository: it reads the task, decides
// and appends on the revision it decided on, deciding again after a
// conflict. The action's span is recorded once it is done, in the trace of
// the task it read.
func (o *Operator) act(ctx context.Context, taskID, by, action string, decide func(*domain.Task, *domain.Workflow, domain.Decision) ([]domain.Event, error)) error {
	if by == "" {
		return errors.New("an operator action must say who does it")
	}
	repo := o.Tasks
	if repo == nil {
		r := NewTaskRepository(o.Store)
		r.Observer = o.Observer
		repo = r
	}
	began := time.Now()
	var taskTrace string
	meta := domain.EventMetadata{CausationID: "operator/" + by, Actor: "operator/" + by}
	_, err := repo.Update(ctx, taskID, nil, meta, func(t *domain.Task) ([]domain.Event, error) {
		taskTrace = t.TraceParent
		wf, err := o.Workflows.Workflow(ctx, t.Workflow, t.WorkflowVersion)
		if err != nil {
			return nil, err
		}
		return decide(t, wf, domain.Decision{Now: o.Clock.Now(), Actor: by, Random: rand.Float64()})
	})
	if taskTrace != "" {
		_, span := tracing.Tracer(o.Tracing).Start(tracing.WithTraceParent(ctx, taskTrace), SpanOperator, trace.WithTimestamp(began),
			trace.WithAttributes(AttrTaskID.String(taskID), attribute.String("saga.operator.action", action), attribute.String("saga.operator.by", by)))
		tracing.EndSpan(span, err)
	}
	return err
}
