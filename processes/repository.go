package processes

import (
	"context"
	"sync/atomic"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
)

// DefaultMaxConflicts bounds how often one update is decided again after
// other writers appended first.
const DefaultMaxConflicts = 10

// TaskRepository implements domain.TaskRepository over the event store: the
// one place that loads a task, decides, appends on the revision decided on
// and retries after a conflict. It is safe for concurrent use; decisions for
// one task are serialised by the store's expected revisions, not by it.
type TaskRepository struct {
	Store EventStore
	// MaxConflicts defaults to DefaultMaxConflicts.
	MaxConflicts int
	// Observer, when set, hears of every task an Update takes to a final
	// state (Observer.TaskFinished).
	Observer Observer

	unreadable atomic.Int64
}

var _ domain.TaskRepository = (*TaskRepository)(nil)

// NewTaskRepository returns a repository over store.
func NewTaskRepository(store EventStore) *TaskRepository {
	return &TaskRepository{Store: store, MaxConflicts: DefaultMaxConflicts}
}

// Unreadable counts the task streams that could not be folded because an
// event in them could not be read (domain.ErrUnreadableEvent).
func (r *TaskRepository) Unreadable() int64 { return r.unreadable.Load() }

// Load reads and folds a task's stream with domain.FoldRecorded. A task
// never submitted, or whose every event expired, comes back with Exists
// false and no error; one whose first events expired (its workflow's
// retention) is domain.ErrTaskExpired, which is also ErrTaskNotFound. A
// stream with an unreadable event is an error (domain.ErrUnreadableEvent),
// counted.
func (r *TaskRepository) Load(ctx context.Context, id string) (*domain.Task, error) {
	return r.loadUntil(ctx, id, -1)
}

// LoadBefore folds a task's stream up to, not including, revision until.
func (r *TaskRepository) LoadBefore(ctx context.Context, id string, until uint64) (*domain.Task, error) {
	return r.loadUntil(ctx, id, int64(until))
}

func (r *TaskRepository) loadUntil(ctx context.Context, id string, until int64) (*domain.Task, error) {
	recorded, err := r.Store.ReadStream(ctx, domain.TaskStream(id))
	if err != nil {
		return nil, errors.Wrapf(err, "read task %s", id)
	}
	if domain.HistoryExpired(recorded) {
		return nil, domain.TaskExpiredError(id, recorded[0].Revision)
	}
	if until >= 0 {
		n := 0
		for n < len(recorded) && int64(recorded[n].Revision) < until {
			n++
		}
		recorded = recorded[:n]
	}
	t, err := domain.FoldRecorded(id, recorded)
	if err != nil {
		if errors.Is(err, domain.ErrUnreadableEvent) {
			r.unreadable.Add(1)
		}
		return nil, err
	}
	return t, nil
}

// Create implements domain.TaskRepository.
func (r *TaskRepository) Create(ctx context.Context, id string, meta domain.EventMetadata, events ...domain.Event) error {
	meta.CorrelationID = id
	batch, err := toNewEvents(events, meta)
	if err != nil {
		// It would not encode the next time either.
		return errors.Mark(err, domain.ErrAppendRefused)
	}
	_, err = r.Store.Append(ctx, domain.TaskStream(id), domain.ExpectNoStream(), batch...)
	if errors.Is(err, domain.ErrConcurrencyConflict) {
		return errors.Mark(errors.Wrapf(err, "create task %s", id), domain.ErrTaskExists)
	}
	return err
}

// CreateDecided creates a task's stream with its submission (under meta)
// and what was decided for it at once (under decidedMeta), in one append.
// A stream that exists already is domain.ErrTaskExists; events that cannot
// be encoded are domain.ErrAppendRefused.
func (r *TaskRepository) CreateDecided(ctx context.Context, id string, meta domain.EventMetadata, submitted []domain.Event,
	decidedMeta domain.EventMetadata, decided []domain.Event) error {
	meta.CorrelationID, decidedMeta.CorrelationID = id, id
	batch, err := toNewEvents(submitted, meta)
	if err == nil {
		var more []domain.NewEvent
		more, err = toNewEvents(decided, decidedMeta)
		batch = append(batch, more...)
	}
	if err != nil {
		return errors.Mark(err, domain.ErrAppendRefused)
	}
	_, err = r.Store.Append(ctx, domain.TaskStream(id), domain.ExpectNoStream(), batch...)
	if errors.Is(err, domain.ErrConcurrencyConflict) {
		return errors.Mark(errors.Wrapf(err, "create task %s", id), domain.ErrTaskExists)
	}
	return err
}

// Update implements domain.TaskRepository. After a conflict, or when known
// is nil, it reads the stream; decide then sees the fresh state.
func (r *TaskRepository) Update(ctx context.Context, id string, known *domain.Task, meta domain.EventMetadata, decide domain.UpdateFunc) (domain.Updated, error) {
	meta.CorrelationID = id
	limit := r.MaxConflicts
	if limit <= 0 {
		limit = DefaultMaxConflicts
	}
	var out domain.Updated
	t := known
	for {
		if t == nil {
			var err error
			if t, err = r.Load(ctx, id); err != nil {
				return out, err
			}
			out.Read = true
		}
		out.Task = t
		if !t.Exists() {
			// Only the submitter creates task streams: the expected
			// revision would be "no stream" and the append would make one.
			return out, errors.Wrapf(domain.ErrTaskNotFound, "%q", id)
		}
		events, err := decide(t)
		if err != nil || len(events) == 0 {
			return out, err
		}
		batch, err := toNewEvents(events, meta)
		if err != nil {
			return out, err
		}
		_, err = r.Store.Append(ctx, domain.TaskStream(id), domain.ExpectAfter(t.Revision), batch...)
		switch {
		case err == nil:
			wasFinal := t.State.Terminal()
			for _, e := range events {
				t.Apply(e)
			}
			taskFinished(r.Observer, t, wasFinal)
			out.Events = events
			return out, nil
		case !errors.Is(err, domain.ErrConcurrencyConflict):
			return out, errors.Wrapf(err, "append to task %s", id)
		}
		out.Conflicts++
		if out.Conflicts >= limit {
			return out, errors.Wrapf(err, "task %s: gave up after %d conflicting decisions", id, out.Conflicts)
		}
		t = nil
	}
}
