package domain

import (
	"time"

	"github.com/cockroachdb/errors"
)

// ErrTaskExpired is returned for a task whose history the event store no
// longer has from its start: the task finished and its workflow's retention
// (Retention.FinishedTasks) has passed. Errors that carry it are marked
// ErrTaskNotFound too, so that every caller that passes over an unknown task
// passes over an expired one.
var ErrTaskExpired = errors.New("task expired: its history is past its workflow's retention")

// Bounds of Retention.FinishedTasks.
const (
	// MinFinishedTaskRetention is the shortest retention of finished
	// tasks: long enough for the status publisher, the task view and an
	// operator's first look to have read the task's end.
	MinFinishedTaskRetention = time.Minute
	// MaxFinishedTaskRetention is the longest; a workflow that gives none
	// keeps its tasks forever.
	MaxFinishedTaskRetention = 10 * 365 * 24 * time.Hour
)

// Retention says how long the event store keeps the tasks of a workflow.
// The zero value keeps them forever.
type Retention struct {
	// FinishedTasks is how long the stream of a task is kept after the
	// task finished (Processed or Compensated; a task in Error waits for an
	// operator and is kept). Zero keeps it forever.
	FinishedTasks time.Duration
}

// FinishedTaskMaxAge is the $maxAge to give the stream of a task of a
// workflow with retention r that was submitted at submitted and finished
// at finished: the whole history, from its first event, stays readable
// for r.FinishedTasks after the end, then expires. It is rounded up to a
// whole second (the unit of $maxAge). ok is false when the workflow keeps
// its tasks forever.
func (r Retention) FinishedTaskMaxAge(submitted, finished time.Time) (maxAge time.Duration, ok bool) {
	if r.FinishedTasks <= 0 {
		return 0, false
	}
	ran := max(finished.Sub(submitted), 0)
	return (r.FinishedTasks + ran + time.Second - 1).Truncate(time.Second), true
}

// TaskExpiredError says that the events of task id before revision first
// are gone: the error is ErrTaskExpired and ErrTaskNotFound.
func TaskExpiredError(id string, first uint64) error {
	return errors.Mark(errors.Wrapf(ErrTaskExpired, "task %q: the store keeps only its events from revision %d", id, first), ErrTaskNotFound)
}

// HistoryExpired reports whether a task stream's events, as read, have
// lost their start to the workflow's retention: the first one read is not
// the first the stream had.
func HistoryExpired(recorded []RecordedEvent) bool {
	return len(recorded) > 0 && recorded[0].Revision > 0
}

// retention reads a workflow's retention: {finishedTasks: 1h}.
func (p *defParser) retention(path string, v any) Retention {
	var r Retention
	m := p.object(path, v, "finishedTasks")
	if m == nil {
		return r
	}
	if v, ok := m["finishedTasks"]; ok {
		r.FinishedTasks = p.duration(join(path, "finishedTasks"), v)
	}
	return r
}

// validateRetention checks a workflow's retention.
func validateRetention(r Retention, add func(string, string, ...any)) {
	switch d := r.FinishedTasks; {
	case d == 0:
	case d < MinFinishedTaskRetention:
		add("retention.finishedTasks", "must be at least %s (leave it out to keep finished tasks forever), not %s", MinFinishedTaskRetention, d)
	case d > MaxFinishedTaskRetention:
		add("retention.finishedTasks", "must be at most %s (leave it out to keep finished tasks forever), not %s", MaxFinishedTaskRetention, d)
	}
}

// retentionDoc adds a workflow's retention to its JSON document, when it
// has one, so that a definition without one equals one written before
// retention existed.
func retentionDoc(doc map[string]any, r Retention) {
	if r.FinishedTasks != 0 {
		doc["retention"] = map[string]any{"finishedTasks": r.FinishedTasks.String()}
	}
}
