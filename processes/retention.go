package processes

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
)

// DefaultRetentionConcurrency bounds the stream limits a
// FinishedTaskRetention sets at once.
const DefaultRetentionConcurrency = 16

// FinishedTaskRetention gives the stream of each task that finishes
// (Processed or Compensated) the $maxAge its workflow's retention asks for
// (domain.Retention.FinishedTaskMaxAge), so that the store drops the
// finished task's events once the retention has passed and a scavenge
// reclaims their space. A workflow without retention keeps its tasks; a
// task in Error waits for an operator and is kept.
//
// The status publisher calls Finished for each task end it folds and Wait
// before its checkpoint passes those ends, so that after a crash the
// limits are set again from the checkpoint: setting a stream's $maxAge
// twice, to the same value, is harmless. Finished starts the limit and
// returns; at most Concurrency limits are being set at once.
type FinishedTaskRetention struct {
	Workflows Workflows
	Limits    StreamLimiter
	// Concurrency defaults to DefaultRetentionConcurrency.
	Concurrency int
	Logger      *slog.Logger

	once    sync.Once
	slots   chan struct{}
	running sync.WaitGroup
	mu      sync.Mutex
	err     error
	limited atomic.Int64
}

// Limited counts the task streams given a $maxAge.
func (r *FinishedTaskRetention) Limited() int64 { return r.limited.Load() }

// Finished starts limiting the stream of task t, which finished at at (its
// final event's recorded time, the store's clock). It returns an error
// only when the task's workflow could not be read; a workflow that is not
// registered keeps the task.
func (r *FinishedTaskRetention) Finished(ctx context.Context, t *domain.Task, at time.Time) error {
	w, err := r.Workflows.Workflow(ctx, t.Workflow, max(t.WorkflowVersion, 1))
	if errors.Is(err, domain.ErrUnknownWorkflow) {
		r.logger().Warn("finished task kept: its workflow is not registered", "task_id", t.ID, "workflow", t.Workflow, "version", t.WorkflowVersion)
		return nil
	}
	if err != nil {
		return errors.Wrapf(err, "retention of task %s", t.ID)
	}
	maxAge, ok := w.Retention.FinishedTaskMaxAge(t.SubmittedAt, at)
	if !ok {
		return nil
	}
	r.once.Do(func() {
		n := r.Concurrency
		if n <= 0 {
			n = DefaultRetentionConcurrency
		}
		r.slots = make(chan struct{}, n)
	})
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.running.Add(1)
	go func() {
		defer func() { <-r.slots; r.running.Done() }()
		err := r.Limits.LimitStream(ctx, domain.TaskStream(t.ID), 0, maxAge)
		switch {
		case err == nil:
			r.limited.Add(1)
		case errors.Is(err, domain.ErrAppendRefused):
			// Refused for good (a deleted stream): asking again would not
			// help, and the task's statuses must not wait on it.
			r.logger().Error("finished task kept: the store refused its retention", "task_id", t.ID, "err", err.Error())
		default:
			r.mu.Lock()
			if r.err == nil {
				r.err = err
			}
			r.mu.Unlock()
		}
	}()
	return nil
}

// Wait waits for every limit started so far and returns the first that
// failed since the last Wait, if any.
func (r *FinishedTaskRetention) Wait() error {
	r.running.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.err
	r.err = nil
	return err
}

func (r *FinishedTaskRetention) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}
