package taskdb_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/taskdb"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/projections"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func task(id, workflow string, state domain.TaskState, submitted time.Time) *protocol.TaskView {
	t := domain.NewTask(id)
	t.Revision, t.Workflow, t.State, t.SubmittedAt, t.UpdatedAt = 3, workflow, state, submitted, submitted
	return protocol.ViewOf(t)
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

	require.NoError(t, db.Commit(ctx, []*protocol.TaskView{task("a", "order", domain.StateProcessing, t0), task("b", "order", domain.StateProcessing, t0)}, 100))
	require.NoError(t, db.Commit(ctx, []*protocol.TaskView{task("a", "order", domain.StateProcessed, t0)}, 200))
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
	require.Error(t, db.Commit(cancelled, []*protocol.TaskView{task("a", "order", domain.StateError, t0)}, 300))
	pos, _, _ = db.Checkpoint(ctx)
	assert.Equal(t, uint64(200), pos)
	got, _, _ = db.Get(ctx, "a")
	assert.Equal(t, domain.StateProcessed, got.State)
}

func TestListPagesNewestFirstWithFilters(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	var tasks []*protocol.TaskView
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

// TestListFiltersByStepAndReasonAsMatchesSays fills the view with tasks at
// every state of two steps, with reasons in mixed case and with SQL's own
// wildcards, and checks that each query lists exactly the tasks
// projections.TaskQuery.Matches keeps: the SQL and the Go agree.
func TestListFiltersByStepAndReasonAsMatchesSays(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	stepStates := []domain.StepState{domain.StepStatePending, domain.StepStateProcessing, domain.StepStateRetrying, domain.StepStateProcessed,
		domain.StepStateError, domain.StepStateCompensating, domain.StepStateCompensated}
	reasons := []string{"", "Payment gateway answered 503", "payment REFUSED", "100% off_code", "it's quoted", "zahlung abgelehnt: Übergröße"}
	var tasks []*protocol.TaskView
	for i := range 7 * 7 * len(reasons) {
		v := task(fmt.Sprintf("f-%03d", i), "order", domain.StateError, t0.Add(time.Duration(i)*time.Millisecond))
		v.Steps = []*protocol.StepView{{Name: "reserve", LegView: protocol.LegView{State: stepStates[i%7]}},
			{Name: "charge", LegView: protocol.LegView{State: stepStates[i/7%7]}}}
		v.Reason = reasons[i/49]
		tasks = append(tasks, v)
	}
	require.NoError(t, db.Commit(ctx, tasks, 1))
	for _, q := range []projections.TaskQuery{
		{Step: "charge"}, {Step: "reserve"}, {Step: "nope"}, {Reason: "payment"}, {Reason: "PAYMENT gateway"}, {Reason: "%"},
		{Reason: "_"}, {Reason: "'"}, {Reason: "übergröße"}, {Reason: "Übergröße"}, {Step: "charge", Reason: "refused"}, {Step: "reserve", Reason: "off_"},
	} {
		var want []string
		for i := len(tasks) - 1; i >= 0; i-- {
			if q.Matches(tasks[i]) {
				want = append(want, tasks[i].ID)
			}
		}
		q.Limit = projections.MaxPageSize
		page, err := db.List(ctx, q)
		require.NoError(t, err)
		var got []string
		for _, v := range page.Tasks {
			got = append(got, v.ID)
		}
		assert.Equal(t, want, got, "%+v", q)
	}
	assert.True(t, (projections.TaskQuery{Step: "charge"}).Matches(tasks[7*4]), "a task whose charge failed is at charge")
	assert.False(t, (projections.TaskQuery{Reason: "übergröße"}).Matches(tasks[len(tasks)-1]), "case is ignored for ASCII only")
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

// oldFile makes a task view file as a build before the format was recorded
// left it (user_version 0), holding one row of what that build served.
func oldFile(t *testing.T, path string, version int) []byte {
	row, err := os.ReadFile("../../domain/protocol/testdata/task-before-view-types.json")
	require.NoError(t, err)
	db, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer db.Close()
	for _, stmt := range []string{
		`CREATE TABLE tasks (id TEXT PRIMARY KEY, workflow TEXT NOT NULL, state TEXT NOT NULL, submitted_at INTEGER NOT NULL,
			updated_at INTEGER NOT NULL, body BLOB NOT NULL) WITHOUT ROWID`,
		`CREATE TABLE counts (state TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID`,
		`CREATE TABLE checkpoint (id INTEGER PRIMARY KEY CHECK (id = 0), position INTEGER NOT NULL)`,
		`INSERT INTO counts VALUES ('Compensating', 1)`,
		`INSERT INTO checkpoint VALUES (0, 42)`,
		fmt.Sprintf(`PRAGMA user_version = %d`, version),
	} {
		_, err := db.Exec(stmt)
		require.NoError(t, err, stmt)
	}
	_, err = db.Exec(`INSERT INTO tasks VALUES ('o-1', 'order', 'Compensating', 1, 2, ?)`, row)
	require.NoError(t, err)
	return row
}

// TestOpenReadsTheFileOfTheBuildBefore: a task view written before rows had
// a recorded format (domain.Task's JSON) is read as it is, and stamped.
func TestOpenReadsTheFileOfTheBuildBefore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "tasks-1.db")
	row := oldFile(t, path, 0)
	db, err := taskdb.Open(path)
	require.NoError(t, err)
	defer db.Close()
	got, ok, err := db.Get(ctx, "o-1")
	require.NoError(t, err)
	require.True(t, ok)
	var want protocol.TaskView
	require.NoError(t, json.Unmarshal(row, &want))
	assert.Equal(t, &want, got)
	assert.Equal(t, domain.StepStateRetrying, got.Steps[0].Compensation.State)
	page, err := db.List(ctx, projections.TaskQuery{Raw: true})
	require.NoError(t, err)
	summary, err := json.Marshal(want.Summary())
	require.NoError(t, err)
	assert.JSONEq(t, string(summary), string(page.Raw[0]), "the API lists the old row's summary")
	assert.Nil(t, want.Summary().Steps[0].Result)
	pos, ok, err := db.Checkpoint(ctx)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, uint64(42), pos, "and the view resumes where it was")

	var version int
	raw, err := sql.Open("sqlite", "file:"+path)
	require.NoError(t, err)
	defer raw.Close()
	require.NoError(t, raw.QueryRow(`PRAGMA user_version`).Scan(&version))
	assert.Equal(t, taskdb.SchemaVersion, version)
}

// TestOpenRefusesRowsOfAnotherFormat: a file written by a build whose rows
// this one cannot read is refused, untouched, so that the caller rebuilds
// the view in a fresh file.
func TestOpenRefusesRowsOfAnotherFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tasks-1.db")
	oldFile(t, path, taskdb.SchemaVersion+1)
	_, err := taskdb.Open(path)
	assert.ErrorIs(t, err, taskdb.ErrSchemaVersion)

	fresh, err := taskdb.Open(filepath.Join(t.TempDir(), "tasks-2.db"))
	require.NoError(t, err)
	require.NoError(t, fresh.Close())
}

// BenchmarkCommit measures the task view's write path as the projection
// drives it under load: a batch of 150 tasks, two thirds of them new, the
// rest updated, per commit.
func BenchmarkCommit(b *testing.B) {
	ctx := context.Background()
	db, err := taskdb.Open(filepath.Join(b.TempDir(), "tasks.db"))
	require.NoError(b, err)
	defer db.Close()
	const batch = 150
	next := 0
	b.ReportAllocs()
	for b.Loop() {
		views := make([]*protocol.TaskView, 0, batch)
		for i := range batch {
			id := next + i
			if i%3 == 0 && id > batch {
				id -= batch // an update of a task of an earlier batch
			}
			views = append(views, task(fmt.Sprintf("task-%08d", id), "order", domain.StateProcessing, t0.Add(time.Duration(id))))
		}
		next += batch
		require.NoError(b, db.Commit(ctx, views, uint64(next)))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "µs/task")
}

// TestNewFileHasPagesThatHoldARow: a new view file has 16 KiB pages, so a
// task's row stays in the B-tree instead of spilling into an overflow page
// (which made the file four times larger with SQLite's 4 KiB default).
func TestNewFileHasPagesThatHoldARow(t *testing.T) {
	db := open(t)
	raw, err := sql.Open("sqlite", "file:"+db.Path()+"?mode=ro")
	require.NoError(t, err)
	defer raw.Close()
	var size int
	require.NoError(t, raw.QueryRow(`PRAGMA page_size`).Scan(&size))
	assert.Equal(t, 16384, size)
	var mode string
	require.NoError(t, raw.QueryRow(`PRAGMA journal_mode`).Scan(&mode))
	assert.Equal(t, "wal", mode, "the view still runs in WAL mode")
}

// BenchmarkListPage reads pages of 1,000 Processed tasks (raw rows, as the
// API serves them) from a view of 20,000, walking them by cursor.
func BenchmarkListPage(b *testing.B) {
	ctx := context.Background()
	db, err := taskdb.Open(filepath.Join(b.TempDir(), "tasks.db"))
	require.NoError(b, err)
	defer db.Close()
	const n = 20000
	for start := 0; start < n; start += 500 {
		views := make([]*protocol.TaskView, 0, 500)
		for i := start; i < start+500; i++ {
			v := task(fmt.Sprintf("task-%08d", i), "order", domain.StateProcessed, t0.Add(time.Duration(i)*time.Millisecond))
			// About the size of a finished three-step demo task: every
			// step with its result.
			for _, name := range []string{"reserve-inventory", "charge-payment", "schedule-shipping"} {
				v.Steps = append(v.Steps, &protocol.StepView{Name: name, Agent: "agent", LegView: protocol.LegView{State: domain.StepStateProcessed, Attempt: 1,
					IdempotencyKey: v.ID + "/" + name}, Result: json.RawMessage(`{"service":"x","action":"` + name + `","key":"` + v.ID + `/` + name + `","at":"2026-11-22T10:00:00.123456789Z"}`)})
			}
			views = append(views, v)
		}
		require.NoError(b, db.Commit(ctx, views, uint64(start+500)))
	}
	cursor := ""
	b.ReportAllocs()
	for b.Loop() {
		page, err := db.List(ctx, projections.TaskQuery{State: domain.StateProcessed, Limit: 1000, Cursor: cursor, Raw: true})
		require.NoError(b, err)
		if cursor = page.NextCursor; cursor == "" {
			continue
		}
	}
}

// TestListLeavesResultsOutAndBoundsPagesInBytes replays tasks of 99 steps
// with 60 KiB results each (6 MB a task): a page of them lists the steps
// without their results, Get still has them, and a page with a byte bound
// ends early with a cursor that walks every task.
func TestListLeavesResultsOutAndBoundsPagesInBytes(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	result, err := json.Marshal(map[string]string{"blob": strings.Repeat("x", 60<<10)})
	require.NoError(t, err)
	var tasks []*protocol.TaskView
	for i := range 12 {
		v := task(fmt.Sprintf("big-%02d", i), "order", domain.StateProcessed, t0.Add(time.Duration(i)*time.Second))
		for s := range 99 {
			v.Steps = append(v.Steps, &protocol.StepView{Name: fmt.Sprintf("s%d", s), LegView: protocol.LegView{State: domain.StepStateProcessed}, Result: result})
		}
		tasks = append(tasks, v)
	}
	require.NoError(t, db.Commit(ctx, tasks, 1))

	page, err := db.List(ctx, projections.TaskQuery{Raw: true, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, page.Raw, 12)
	size := 0
	for _, row := range page.Raw {
		size += len(row)
		var v protocol.TaskView
		require.NoError(t, json.Unmarshal(row, &v))
		require.Len(t, v.Steps, 99)
		assert.Nil(t, v.Steps[0].Result, "a list carries no results")
		assert.Equal(t, len(result), v.Steps[0].ResultBytes, "only their sizes")
	}
	assert.Less(t, size, 1<<20, "12 tasks of 6 MB list in less than 1 MiB")
	decoded, err := db.List(ctx, projections.TaskQuery{Limit: 10})
	require.NoError(t, err)
	require.Len(t, decoded.Tasks, 10)
	assert.Nil(t, decoded.Tasks[0].Steps[0].Result)
	got, ok, err := db.Get(ctx, "big-00")
	require.NoError(t, err)
	require.True(t, ok)
	assert.JSONEq(t, string(result), string(got.Steps[98].Result), "the task itself keeps its results")

	one := len(page.Raw[0])
	seen := 0
	q := projections.TaskQuery{Raw: true, Limit: 1000, MaxBytes: 3*one + one/2}
	for {
		p, err := db.List(ctx, q)
		require.NoError(t, err)
		require.NotEmpty(t, p.Raw)
		assert.LessOrEqual(t, len(p.Raw), 3, "a page ends at its byte bound")
		seen += len(p.Raw)
		if p.NextCursor == "" {
			break
		}
		q.Cursor = p.NextCursor
	}
	assert.Equal(t, 12, seen, "and the cursor walks every task")
	p, err := db.List(ctx, projections.TaskQuery{Raw: true, MaxBytes: 1})
	require.NoError(t, err)
	assert.Len(t, p.Raw, 1, "a page holds one task whatever its bound")
}

// TestCommitStoresTheJSONOfEachTaskAndItsSummary: a row holds exactly what
// json.Marshal gives for its task and for its summary, though one buffer
// holds each task's JSON in turn (longer and shorter tasks alternate, so a
// row that kept the buffer's bytes would show another task's).
func TestCommitStoresTheJSONOfEachTaskAndItsSummary(t *testing.T) {
	ctx := context.Background()
	db := open(t)
	var views []*protocol.TaskView
	for i := range 6 {
		v := task(fmt.Sprintf("t-%d", i), "order", domain.StateProcessing, t0.Add(time.Duration(i)))
		for range (i % 2) * 4 {
			v.Steps = append(v.Steps, &protocol.StepView{Name: "pay <&>", LegView: protocol.LegView{State: domain.StepStateProcessed,
				LastError: `Post "http://pay": refused` + strings.Repeat("\u2028", i)}, Result: json.RawMessage(`{ "paid" : "<b>é</b>" }`)})
		}
		views = append(views, v)
	}
	require.NoError(t, db.Commit(ctx, views, 1))

	raw, err := sql.Open("sqlite", "file:"+db.Path()+"?mode=ro")
	require.NoError(t, err)
	defer raw.Close()
	for _, v := range views {
		var body, summary []byte
		require.NoError(t, raw.QueryRow(`SELECT body, summary FROM tasks WHERE id = ?`, v.ID).Scan(&body, &summary))
		want, err := json.Marshal(v)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(body), v.ID)
		want, err = json.Marshal(v.Summary())
		require.NoError(t, err)
		assert.Equal(t, string(want), string(summary), v.ID)
	}
}
