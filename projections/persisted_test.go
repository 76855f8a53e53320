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
	writes   map[string]int // rows written, per task
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
		if m.writes == nil {
			m.writes = map[string]int{}
		}
		m.writes[t.ID]++
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
		view.BatchSize, view.CacheTasks, view.MaxUpdateDelay = 1, cacheTasks, -1
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

// noCatchUp delivers events from a position on and never says it caught
// up, as a subscription whose events are still coming.
type noCatchUp []domain.RecordedEvent

func (s noCatchUp) SubscribeAll(ctx context.Context, from domain.SubscribeFrom, prefix string, handle func(domain.SubscriptionItem) error) error {
	for i := range s {
		if pos, after := from.After(); after && s[i].Position <= pos {
			continue
		}
		if err := handle(domain.SubscriptionItem{Event: &s[i]}); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// runUntil runs view over events until until holds, then stops it.
func runUntil(t *testing.T, view *projections.StoredTasks, events noCatchUp, until func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- view.Run(ctx, events) }()
	require.Eventually(t, until, 10*time.Second, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}

// TestATaskInFlightIsWrittenWhenNewAndWhenFinished: with a commit per
// event, a task's row was written at every commit; changes to a task in
// flight now wait in memory (MaxUpdateDelay), so the row is written when the
// task is new and when it finishes, and ends the same.
func TestATaskInFlightIsWrittenWhenNewAndWhenFinished(t *testing.T) {
	history := oneByOne(audittest.History())
	run := func(delay time.Duration) *memStore {
		store := &memStore{rows: map[string][]byte{}}
		view := projections.NewStoredTasks(store, nil)
		view.BatchSize, view.MaxUpdateDelay = 1, delay
		require.NoError(t, runView(t, view, history))
		return store
	}
	every, held := run(-1), run(time.Hour)
	assert.Equal(t, len(history), every.writes["o-1"], "without holding, a write per commit")
	assert.Equal(t, 2, held.writes["o-1"], "holding: when new and when finished")
	assert.Equal(t, string(every.rows["o-1"]), string(held.rows["o-1"]))
	assert.Equal(t, every.position, held.position)
}

// TestHeldChangesAreFoldedAgainAfterARestart: the checkpoint never passes
// a change held in memory, so a view stopped (or killed) with changes held
// folds them again when it runs next, to the row of a view that held none.
func TestHeldChangesAreFoldedAgainAfterARestart(t *testing.T) {
	history := audittest.History()
	store := &memStore{rows: map[string][]byte{}}
	view := projections.NewStoredTasks(store, nil)
	view.BatchSize, view.MaxUpdateDelay = 1, time.Hour
	runUntil(t, view, noCatchUp(history[:10]), func() bool { return view.Applied()+view.Skipped() == 10 })
	assert.Equal(t, history[0].Position, store.position, "the checkpoint stays before the first held change")
	assert.Equal(t, 1, store.writes["o-1"], "written once, when new")

	require.NoError(t, runView(t, projections.NewStoredTasks(store, nil), oneByOne(history)))
	whole := &memStore{rows: map[string][]byte{}}
	never := projections.NewStoredTasks(whole, nil)
	never.MaxUpdateDelay = -1
	require.NoError(t, runView(t, never, oneByOne(history)))
	assert.Equal(t, string(whole.rows["o-1"]), string(store.rows["o-1"]))
}

// TestAHeldChangeIsWrittenAfterItsDelay: a task in flight that changes and
// then waits (a long step) is written once its change has waited
// MaxUpdateDelay, though no event comes after it.
func TestAHeldChangeIsWrittenAfterItsDelay(t *testing.T) {
	history := audittest.History()
	store := &memStore{rows: map[string][]byte{}}
	view := projections.NewStoredTasks(store, nil)
	view.BatchSize, view.FlushInterval, view.MaxUpdateDelay = 1, time.Millisecond, 20*time.Millisecond
	last := history[4].Position
	runUntil(t, view, noCatchUp(history[:5]), func() bool { return view.Position() == last })
	assert.Equal(t, last, store.position)
	var row protocol.TaskView
	require.NoError(t, json.Unmarshal(store.rows["o-1"], &row))
	assert.Equal(t, int64(history[4].Revision), row.Revision, "the row holds the held changes")
}
