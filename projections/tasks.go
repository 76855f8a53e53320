package projections

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
)

// EventSubscriber is what the projection needs of the event store.
type EventSubscriber interface {
	SubscribeAll(ctx context.Context, from domain.SubscribeFrom, streamPrefix string, handle func(domain.SubscriptionItem) error) error
}

// Tasks is the current-state view of every task. It is safe for concurrent
// use: one goroutine applies events while any number query.
type Tasks struct {
	Logger *slog.Logger

	mu      sync.RWMutex
	tasks   map[string]*domain.Task
	byState map[domain.TaskState]map[string]struct{}
	// position is the store position of the last event applied.
	position uint64
	applied  atomic.Int64
	skipped  atomic.Int64

	readyOnce sync.Once
	ready     chan struct{}
}

// NewTasks returns an empty view.
func NewTasks(logger *slog.Logger) *Tasks {
	return &Tasks{Logger: logger, tasks: map[string]*domain.Task{}, byState: map[domain.TaskState]map[string]struct{}{}, ready: make(chan struct{})}
}

// Run rebuilds the view from the start of the store, then follows it live,
// until ctx ends.
func (v *Tasks) Run(ctx context.Context, store EventSubscriber) error {
	err := store.SubscribeAll(ctx, domain.FromStart(), domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
		if it.CaughtUp {
			v.readyOnce.Do(func() { close(v.ready) })
			return nil
		}
		v.Apply(*it.Event)
		return nil
	})
	if ctx.Err() != nil {
		return nil
	}
	return errors.Wrap(err, "task projection subscription")
}

// Ready is closed once the view has caught up with the store.
func (v *Tasks) Ready() <-chan struct{} { return v.ready }

// Apply folds one recorded event into the view. Events must come in store
// order; an event the view has already applied, or one it cannot read, is
// skipped (and counted).
func (v *Tasks) Apply(e domain.RecordedEvent) {
	id, ok := domain.TaskIDFromStream(e.Stream)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	t := v.tasks[id]
	if t == nil {
		t = domain.NewTask(id)
		v.tasks[id] = t
	}
	before := t.State
	if !foldInto(t, e, v.Logger) {
		v.skipped.Add(1)
		return
	}
	if t.State != before {
		delete(v.byState[before], id)
		if v.byState[t.State] == nil {
			v.byState[t.State] = map[string]struct{}{}
		}
		v.byState[t.State][id] = struct{}{}
	}
	v.position = e.Position
	v.applied.Add(1)
}

// Get returns a copy of a task's current state.
func (v *Tasks) Get(id string) (*domain.Task, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	t, ok := v.tasks[id]
	if !ok || !t.Exists() {
		return nil, false
	}
	return t.Clone(), true
}

// List returns copies of up to limit tasks in the given state (all states
// when state is empty), ordered by id. The ids are gathered under the read
// lock and sorted outside it, so that a list never holds up the writer for
// the sort; a sorted index would avoid gathering every id too.
func (v *Tasks) List(state domain.TaskState, limit int) []*domain.Task {
	v.mu.RLock()
	var ids []string
	if state == "" {
		for id, t := range v.tasks {
			if t.Exists() {
				ids = append(ids, id)
			}
		}
	} else {
		for id := range v.byState[state] {
			ids = append(ids, id)
		}
	}
	v.mu.RUnlock()
	sort.Strings(ids)
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]*domain.Task, 0, len(ids))
	for _, id := range ids {
		// A task may have moved on while the ids were sorted.
		if t := v.tasks[id]; t != nil && (state == "" || t.State == state) {
			out = append(out, t.Clone())
		}
	}
	return out
}

// Counts returns how many tasks are in each state.
func (v *Tasks) Counts() map[domain.TaskState]int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := map[domain.TaskState]int{}
	for s, ids := range v.byState {
		out[s] = len(ids)
	}
	return out
}

// Position is the store position of the last event applied.
func (v *Tasks) Position() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.position
}
