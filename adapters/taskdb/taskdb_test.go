package taskdb_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/taskdb"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func task(id, workflow string, state domain.TaskState, submitted time.Time) *domain.Task {
	t := domain.NewTask(id)
	t.Revision, t.Workflow, t.State, t.SubmittedAt, t.UpdatedAt = 3, workflow, state, submitted, submitted
	return t
}

func open(t *testing.T) *taskdb.DB {
	db, err := taskdb.Open(filepath.Join(t.TempDir(), "tasks.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestCommitKeepsRowsCountsAndCheckpointTogether(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	_, ok, err := db.Checkpoint(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "a new view has no checkpoint")

	require.NoError(t, db.Commit(ctx, []*domain.Task{task("a", "order", domain.StateProcessing, t0), task("b", "order", domain.StateProcessing, t0)}, 100))
	require.NoError(t, db.Commit(ctx, []*domain.Task{task("a", "order", domain.StateProcessed, t0)}, 200))
	pos, ok, err := db.Checkpoint(ctx)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, uint64(200), pos)
	counts, err := db.Counts(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[domain.TaskState]int{domain.StateProcessing: 1, domain.StateProcessed: 1}, counts)
	got, ok, err := db.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, domain.StateProcessed, got.State)
	loaded, err := db.Load(ctx, []string{"a", "b", "nope"})
	require.NoError(t, err)
	assert.Len(t, loaded, 2)

	// A commit that fails leaves rows, counts and checkpoint as they were.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, db.Commit(cancelled, []*domain.Task{task("a", "order", domain.StateError, t0)}, 300))
	pos, _, _ = db.Checkpoint(ctx)
	assert.Equal(t, uint64(200), pos)
	got, _, _ = db.Get(ctx, "a")
	assert.Equal(t, domain.StateProcessed, got.State)
}

func TestListPagesNewestFirstWithFilters(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	var tasks []*domain.Task
	for i := range 250 {
		state := domain.StateProcessed
		if i%5 == 0 {
			state = domain.StateCompensated
		}
		workflow := "order"
		if i%2 == 1 {
			workflow = "signup"
		}
		tasks = append(tasks, task(fmt.Sprintf("t-%03d", i), workflow, state, t0.Add(time.Duration(i/3)*time.Second)))
	}
	require.NoError(t, db.Commit(ctx, tasks, 1))

	var seen []string
	q := projections.TaskQuery{State: domain.StateProcessed, Limit: 30}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 20)
		page, err := db.List(ctx, q)
		require.NoError(t, err)
		for _, tk := range page.Tasks {
			assert.Equal(t, domain.StateProcessed, tk.State)
			seen = append(seen, tk.ID)
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	assert.Len(t, seen, 200, "every Processed task once, across pages")
	unique := map[string]bool{}
	for _, id := range seen {
		unique[id] = true
	}
	assert.Len(t, unique, 200)
	assert.Equal(t, "t-249", seen[0], "newest submission first")

	page, err := db.List(ctx, projections.TaskQuery{Workflow: "signup", Since: t0.Add(10 * time.Second), Until: t0.Add(20 * time.Second), Limit: 1000})
	require.NoError(t, err)
	for _, tk := range page.Tasks {
		assert.Equal(t, "signup", tk.Workflow)
		assert.False(t, tk.SubmittedAt.Before(t0.Add(10*time.Second)))
		assert.True(t, tk.SubmittedAt.Before(t0.Add(20*time.Second)))
	}
	assert.Len(t, page.Tasks, 15)

	raw, err := db.List(ctx, projections.TaskQuery{State: domain.StateProcessed, Limit: 30, Raw: true})
	require.NoError(t, err)
	require.Len(t, raw.Raw, 30, "raw rows, undecoded")
	assert.Empty(t, raw.Tasks)
	assert.Contains(t, string(raw.Raw[0]), `"id":"t-249"`)
	assert.NotEmpty(t, raw.NextCursor)

	_, err = db.List(ctx, projections.TaskQuery{Cursor: "not a cursor!"})
	assert.ErrorIs(t, err, projections.ErrBadCursor)
	page, err = db.List(ctx, projections.TaskQuery{Limit: 5000})
	require.NoError(t, err)
	assert.Len(t, page.Tasks, 250, "a limit over MaxPageSize is capped, not refused")
}

// TestStoredTasksFollowsTheStoreAndResumesFromItsCheckpoint folds a real
// event store into the view, stops, appends more, and starts a new view on
// the same file: it continues from its checkpoint, and a view whose file
// was deleted is rebuilt whole.
func TestStoredTasksFollowsTheStoreAndResumesFromItsCheckpoint(t *testing.T) {
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	require.NoError(t, err)
	defer srv.Close()
	store, err := eventstore.Dial("esdb://"+srv.Addr()+"?tls=false", nil)
	require.NoError(t, err)
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	submit := func(id string) {
		events := []domain.Event{
			domain.TaskSubmitted{TaskID: id, Workflow: "order", WorkflowVersion: 1, Steps: []string{"a"}, SubmittedAt: t0},
			domain.StepDispatched{TaskID: id, Step: "a", Agent: "x", Attempt: 1, CompleteBy: t0.Add(time.Second), DispatchedAt: t0},
			domain.StepSucceeded{TaskID: id, Step: "a", Attempt: 1, At: t0},
			domain.TaskProcessed{TaskID: id, At: t0},
		}
		for i, e := range events {
			data, err := domain.EncodeEvent(e)
			require.NoError(t, err)
			_, err = store.Append(ctx, domain.TaskStream(id), domain.ExpectAfter(int64(i)-1), domain.NewEvent{Type: e.EventType(), Data: data})
			require.NoError(t, err)
		}
	}
	for i := range 50 {
		submit(fmt.Sprintf("o-%02d", i))
	}
	path := filepath.Join(t.TempDir(), "tasks.db")
	run := func(want int) *projections.StoredTasks {
		db, err := taskdb.Open(path)
		require.NoError(t, err)
		defer db.Close()
		view := projections.NewStoredTasks(db, nil)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- view.Run(runCtx, store) }()
		<-view.Ready()
		counts, err := view.Counts(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, counts[domain.StateProcessed])
		stop()
		require.NoError(t, <-done)
		return view
	}
	first := run(50)
	assert.Equal(t, int64(200), first.Applied())
	for i := 50; i < 60; i++ {
		submit(fmt.Sprintf("o-%02d", i))
	}
	second := run(60)
	assert.Equal(t, int64(40), second.Applied(), "the view resumed from its checkpoint")
	assert.Zero(t, second.Skipped())

	require.NoError(t, removeAll(path))
	third := run(60)
	assert.Equal(t, int64(240), third.Applied(), "a deleted view is rebuilt from the store")
}

// removeAll deletes a database file and its write-ahead log.
func removeAll(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}
