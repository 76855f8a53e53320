package projections_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/projections"
	"github.com/sagaengine/saga/projections/audittest"
)

// memStore is a TaskStore in memory that counts the rows it is asked to
// load and can fail a commit.
type memStore struct {
	rows     map[string][]byte
	position uint64
	loaded   int
	failNext bool
}

func (m *memStore) Checkpoint(context.Context) (uint64, bool, error) {
	return m.position, m.position > 0, nil
}

func (m *memStore) Load(_ context.Context, ids []string) (map[string]*protocol.TaskView, error) {
	out := map[string]*protocol.TaskView{}
	for _, id := range ids {
		m.loaded++
		if row, ok := m.rows[id]; ok {
			var v protocol.TaskView
			if err := json.Unmarshal(row, &v); err != nil {
				return nil, err
			}
			out[id] = &v
		}
	}
	return out, nil
}

func (m *memStore) Commit(_ context.Context, tasks []*protocol.TaskView, position uint64) error {
	if m.failNext {
		m.failNext = false
		return errors.New("disk full")
	}
	for _, t := range tasks {
		row, err := json.Marshal(t)
		if err != nil {
			return err
		}
		m.rows[t.ID] = row
	}
	m.position = position
	return nil
}

func (m *memStore) Get(context.Context, string) (*protocol.TaskView, bool, error) {
	return nil, false, nil
}

func (m *memStore) List(context.Context, projections.TaskQuery) (projections.TaskPage, error) {
	return projections.TaskPage{}, nil
}

func (m *memStore) Counts(context.Context) (map[domain.TaskState]int, error) { return nil, nil }

// oneByOne delivers events from a position on, then says it caught up.
type oneByOne []domain.RecordedEvent

func (s oneByOne) SubscribeAll(ctx context.Context, from domain.SubscribeFrom, _ string, handle func(domain.SubscriptionItem) error) error {
	for i := range s {
		if pos, after := from.After(); after && s[i].Position <= pos {
			continue
		}
		if err := handle(domain.SubscriptionItem{Event: &s[i]}); err != nil {
			return err
		}
	}
	if err := handle(domain.SubscriptionItem{CaughtUp: true}); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// runView runs a view over events until it has committed the last of them,
// and returns Run's error.
func runView(t *testing.T, view *projections.StoredTasks, events oneByOne) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- view.Run(ctx, events) }()
	last := events[len(events)-1].Position
	for view.Position() != last {
		select {
		case err := <-done:
			return err
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	return <-done
}

// TestStoredTasksFoldsCachedTasksAsStoredOnes folds a history one commit
// per event, with and without the cache of unfinished tasks: the rows are
// the same, and with the cache the task's row is read once, not at every
// commit. After a failed commit (the cache is emptied: it may hold what the
// store does not) the view resumes from its checkpoint to the same row.
func TestStoredTasksFoldsCachedTasksAsStoredOnes(t *testing.T) {
	history := oneByOne(audittest.History())
	build := func(cacheTasks int) *memStore {
		store := &memStore{rows: map[string][]byte{}}
		view := projections.NewStoredTasks(store, nil)
		view.BatchSize, view.CacheTasks = 1, cacheTasks
		require.NoError(t, runView(t, view, history))
		return store
	}
	cached, uncached := build(projections.DefaultCacheTasks), build(-1)
	assert.Equal(t, string(uncached.rows["o-1"]), string(cached.rows["o-1"]))
	assert.Equal(t, len(history), uncached.loaded, "without a cache the row is read at every commit")
	assert.Equal(t, 1, cached.loaded, "with it, once")

	store := &memStore{rows: map[string][]byte{}}
	view := projections.NewStoredTasks(store, nil)
	view.BatchSize = 1
	require.NoError(t, runView(t, view, history[:3]))
	store.failNext = true
	require.Error(t, runView(t, view, history), "the commit failed")
	require.NoError(t, runView(t, view, history))
	assert.Equal(t, string(uncached.rows["o-1"]), string(store.rows["o-1"]), "after a failed commit the view goes on from its checkpoint to the same row")
}

// fullDisk is a memStore whose commits fail while full is set.
type fullDisk struct {
	*memStore
	full atomic.Bool
}

func (f *fullDisk) Commit(ctx context.Context, tasks []*protocol.TaskView, position uint64) error {
	if f.full.Load() {
		return errors.New("database or disk is full (13)")
	}
	return f.memStore.Commit(ctx, tasks, position)
}

// TestFollowSaysWhyItIsBehindAndCatchesUpOnceItCanWrite: commits refused
// (a full disk) do not stop the view; it says why it is behind, retries
// from its checkpoint, and catches up once commits succeed again.
func TestFollowSaysWhyItIsBehindAndCatchesUpOnceItCanWrite(t *testing.T) {
	history := oneByOne(audittest.History())
	store := &fullDisk{memStore: &memStore{rows: map[string][]byte{}}}
	store.full.Store(true)
	view := projections.NewStoredTasks(store, nil)
	view.BatchSize, view.RetryAfter = 1, time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- view.Follow(ctx, history) }()
	require.Eventually(t, func() bool { return view.Failure() != nil }, 10*time.Second, time.Millisecond)
	assert.Contains(t, view.Failure().Error(), "disk is full")
	select {
	case err := <-done:
		t.Fatalf("the view stopped: %v", err)
	default:
	}

	store.full.Store(false)
	last := history[len(history)-1].Position
	require.Eventually(t, func() bool { return view.Position() == last && view.Failure() == nil }, 10*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	whole := &memStore{rows: map[string][]byte{}}
	require.NoError(t, runView(t, projections.NewStoredTasks(whole, nil), history))
	assert.Equal(t, string(whole.rows["o-1"]), string(store.rows["o-1"]), "the row is the one of a view that never failed")
}
