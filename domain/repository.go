package domain

import (
	"context"
	"strconv"

	"github.com/cockroachdb/errors"
)

// ErrUnreadableEvent is returned when a stored task event cannot be decoded
// (a wire name or a body this version does not know). The fold policy is
// the same everywhere: a task with such an event is not folded past it and
// nothing is decided for it; the caller logs and counts it. Skipping the
// event would decide on a state that is not the task's.
var ErrUnreadableEvent = errors.New("task event cannot be read")

// ErrRevisionGap is returned when a recorded event does not follow the
// revision a task was folded to: events were missed, and the task's
// stream must be read again.
var ErrRevisionGap = errors.New("task event does not follow the folded revision")

// ErrTaskExists is returned when creating a task whose stream exists
// already: the order was submitted before.
var ErrTaskExists = errors.New("task exists already")

// UnreadableEventError says which event of which task could not be read.
type UnreadableEventError struct {
	TaskID   string
	Revision uint64
	Type     string
	Err      error
}

func (e *UnreadableEventError) Error() string {
	return "task " + e.TaskID + " revision " + strconv.FormatUint(e.Revision, 10) + " (" + e.Type + "): " +
		ErrUnreadableEvent.Error() + ": " + e.Err.Error()
}

// Unwrap returns the decoding error.
func (e *UnreadableEventError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnreadableEvent) hold.
func (e *UnreadableEventError) Is(target error) bool { return target == ErrUnreadableEvent }

// ApplyRecorded folds one stored event into the task and returns it
// decoded. An event the task has folded already (its revision is not past
// t.Revision) changes nothing and returns nil. An event that does not
// follow t.Revision is ErrRevisionGap, one that cannot be decoded an
// *UnreadableEventError; in both cases the task is unchanged.
func (t *Task) ApplyRecorded(r *RecordedEvent) (Event, error) {
	switch rev := int64(r.Revision); {
	case rev <= t.Revision:
		return nil, nil
	case rev != t.Revision+1:
		return nil, errors.Wrapf(ErrRevisionGap, "task %s: revision %d after %d", t.ID, rev, t.Revision)
	}
	ev, err := r.Decode()
	if err != nil {
		return nil, &UnreadableEventError{TaskID: t.ID, Revision: r.Revision, Type: r.Type, Err: err}
	}
	t.Apply(ev)
	return ev, nil
}

// FoldRecorded folds a task's stored events, in stream order. It stops at
// the first event it cannot apply and returns the task folded so far with
// the error (see ApplyRecorded): the one fold of stored events that every
// process uses.
func FoldRecorded(id string, recorded []RecordedEvent) (*Task, error) {
	t := NewTask(id)
	for i := range recorded {
		if _, err := t.ApplyRecorded(&recorded[i]); err != nil {
			return t, err
		}
	}
	return t, nil
}

// UpdateFunc decides on a task: it returns the events to append, none when
// there is nothing to do, or an error that stops the update. It may be
// called several times, on fresher states, when other writers append
// first; it must not change the task.
type UpdateFunc func(t *Task) ([]Event, error)

// Updated is the outcome of TaskRepository.Update.
type Updated struct {
	// Task is the task as it now stands: with Events applied after a
	// successful append, else as last folded. It is nil when its stream
	// could not be read or folded.
	Task *Task
	// Events are the events appended; none when the update decided
	// nothing or failed.
	Events []Event
	// Conflicts counts the appends another writer beat; each made the
	// repository read the stream and decide again.
	Conflicts int
	// Read says whether Task was read from the store rather than the
	// known state the caller passed: the caller's cached state is stale.
	Read bool
}

// TaskRepository is the persistence port of tasks: every decision goes
// through it. Implementations read the task's stream (or start from a
// known folded state), fold it with FoldRecorded, decide, append on the
// revision decided on (ExpectAfter(t.Revision)), and on
// ErrConcurrencyConflict read again and decide again, a bounded number of
// times. Effects of the appended events are the caller's, after Update
// returns them.
type TaskRepository interface {
	// Create appends the first events of a new task's stream; a stream
	// that exists is ErrTaskExists. Only the submitter creates tasks.
	Create(ctx context.Context, id string, meta EventMetadata, events ...Event) error
	// Update decides on task id and appends what decide returns. known,
	// when not nil, is the caller's folded state of the task, used
	// instead of reading the stream until a conflict shows it is stale;
	// Update may change it. A task never submitted is ErrTaskNotFound:
	// Update never creates a stream.
	Update(ctx context.Context, id string, known *Task, meta EventMetadata, decide UpdateFunc) (Updated, error)
}
