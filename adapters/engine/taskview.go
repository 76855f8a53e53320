package engine

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/taskdb"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
	"github.com/sagaengine/saga/projections"
)

// ErrRebuildRunning is returned when a rebuild of the task view is asked
// for while one runs.
var ErrRebuildRunning = errors.New("a rebuild of the task view is already running")

// TaskView is the API role's view of tasks: an SQLite file (adapters/taskdb)
// kept by a projections.StoredTasks that follows the event store from the
// file's checkpoint. A rebuild folds the whole store into a fresh file
// while the current one keeps serving, and swaps it in once it has caught
// up. The file in use is named in dir/CURRENT.
type TaskView struct {
	dir    string
	source projections.EventSubscriber
	app    *App

	current atomic.Pointer[viewRun]
	ready   chan struct{}
	// running are the goroutines of the view's projections, which
	// Close waits for.
	running sync.WaitGroup

	mu         sync.Mutex
	rebuilding bool
	last       *RebuildReport
}

// Held is what the task view in use holds in memory (StoredTasks.Held).
func (v *TaskView) Held() processes.Held {
	if r := v.current.Load(); r != nil {
		return r.view.Held()
	}
	return processes.Held{}
}

// viewRun is one task view file and the projection that keeps it.
type viewRun struct {
	file   string
	db     *taskdb.DB
	view   *projections.StoredTasks
	cancel context.CancelFunc
	done   chan struct{}
}

// RebuildReport says how a rebuild of the task view went.
type RebuildReport struct {
	Started  time.Time                `json:"started"`
	Finished time.Time                `json:"finished,omitempty"`
	Events   int64                    `json:"events"`
	PerSec   float64                  `json:"eventsPerSecond"`
	Counts   map[domain.TaskState]int `json:"counts,omitempty"`
	File     string                   `json:"file"`
	Error    string                   `json:"error,omitempty"`
}

const currentFile = "CURRENT"

// openTaskView opens the view named in dir/CURRENT (a new one if none) and
// starts keeping it. A file whose rows this build cannot read
// (taskdb.ErrSchemaVersion: a later build wrote it) is replaced by a fresh
// one, built from the start of the store before the view is ready.
//
// The view in use follows shared (the process's shared subscription, so
// the events cross the network once for every follower); a rebuild follows
// source on a subscription of its own, from the start.
func openTaskView(ctx context.Context, a *App, dir string, shared, source projections.EventSubscriber) (*TaskView, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, errors.Wrapf(err, "create task view directory %s", dir)
	}
	v := &TaskView{dir: dir, source: source, app: a, ready: make(chan struct{})}
	a.closers.push("task view", func() error {
		v.running.Wait()
		return nil
	})
	name := "tasks-1.db"
	if raw, err := os.ReadFile(filepath.Join(dir, currentFile)); err == nil && strings.TrimSpace(string(raw)) != "" {
		name = strings.TrimSpace(string(raw))
	}
	run, err := v.start(ctx, name, shared)
	if errors.Is(err, taskdb.ErrSchemaVersion) {
		stale := name
		name = nextViewFile(stale)
		a.logger.Warn("task view has rows of another format: building a fresh one from the store", "file", stale, "fresh", name, "err", err.Error())
		removeViewFile(dir, name) // a rebuild cut short left it
		if run, err = v.start(ctx, name, shared); err == nil {
			removeViewFile(dir, stale)
		}
	}
	if err != nil {
		return nil, err
	}
	v.current.Store(run)
	if err := v.setCurrent(name); err != nil {
		return nil, err
	}
	v.running.Add(1)
	go func() {
		defer v.running.Done()
		select {
		case <-run.view.Ready():
			close(v.ready)
		case <-ctx.Done():
		}
	}()
	return v, nil
}

// start opens a view file and runs its projection until it is stopped.
func (v *TaskView) start(ctx context.Context, name string, source projections.EventSubscriber) (*viewRun, error) {
	db, err := taskdb.Open(filepath.Join(v.dir, name))
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	r := &viewRun{file: name, db: db, view: projections.NewStoredTasks(db, v.app.logger), cancel: cancel, done: make(chan struct{})}
	r.view.BatchSize = v.app.cfg.TaskViewBatch
	r.view.MaxUpdateDelay = v.app.cfg.TaskViewUpdateDelay
	v.running.Add(1)
	go func() {
		defer v.running.Done()
		defer close(r.done)
		defer db.Close()
		// A commit refused (a full disk) makes the view report it in
		// readiness and run again from its checkpoint: it must not stop
		// the process.
		v.app.report("task view "+name, r.view.Follow(runCtx, source))
	}()
	return r, nil
}

// stop stops the projection and closes its file.
func (r *viewRun) stop() {
	r.cancel()
	<-r.done
}

// setCurrent records the file in use, atomically.
func (v *TaskView) setCurrent(name string) error {
	tmp := filepath.Join(v.dir, currentFile+".tmp")
	if err := os.WriteFile(tmp, []byte(name+"\n"), 0o644); err != nil {
		return errors.Wrap(err, "record the task view in use")
	}
	return errors.Wrap(os.Rename(tmp, filepath.Join(v.dir, currentFile)), "record the task view in use")
}

// Ready is closed once the view first caught up with the store.
func (v *TaskView) Ready() <-chan struct{} { return v.ready }

// Get returns a task's current state.
func (v *TaskView) Get(ctx context.Context, id string) (*protocol.TaskView, bool, error) {
	return v.current.Load().view.Get(ctx, id)
}

// List returns a page of tasks.
func (v *TaskView) List(ctx context.Context, q projections.TaskQuery) (projections.TaskPage, error) {
	return v.current.Load().view.List(ctx, q)
}

// Counts returns how many tasks are in each state.
func (v *TaskView) Counts(ctx context.Context) (map[domain.TaskState]int, error) {
	return v.current.Load().view.Counts(ctx)
}

// Failure says why the view in use is behind (a commit its file refused),
// while it retries; nil while it keeps up.
func (v *TaskView) Failure() error { return v.current.Load().view.Failure() }

// Applied counts the events the view in use folded in since it started.
func (v *TaskView) Applied() int64 { return v.current.Load().view.Applied() }

// Rebuild starts folding the whole store into a fresh file; once it has
// caught up it replaces the view in use, whose file is deleted. It returns
// at once; Status tells how it goes.
func (v *TaskView) Rebuild(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.rebuilding {
		return ErrRebuildRunning
	}
	v.rebuilding = true
	report := &RebuildReport{Started: time.Now()}
	v.last = report
	go v.rebuild(ctx, report)
	return nil
}

// RebuildStatus implements httpapi.Rebuilder.
func (v *TaskView) RebuildStatus() (running bool, last any) {
	running, report := v.Status()
	if report == nil {
		return running, nil
	}
	return running, report
}

// Status reports whether a rebuild runs, and how the last one went.
func (v *TaskView) Status() (running bool, last *RebuildReport) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.last != nil {
		copied := *v.last
		last = &copied
	}
	return v.rebuilding, last
}

func (v *TaskView) rebuild(ctx context.Context, report *RebuildReport) {
	err := v.rebuildInto(ctx, report)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.rebuilding = false
	report.Finished = time.Now()
	if err != nil {
		report.Error = err.Error()
		v.app.logger.Error("task view rebuild failed", "err", err.Error())
	}
}

func (v *TaskView) rebuildInto(ctx context.Context, report *RebuildReport) error {
	old := v.current.Load()
	name := nextViewFile(old.file)
	removeViewFile(v.dir, name) // a rebuild cut short left it
	v.mu.Lock()
	report.File = name
	v.mu.Unlock()
	fresh, err := v.start(v.app.runCtx, name, v.source)
	if err != nil {
		return err
	}
	select {
	case <-fresh.view.Ready():
	case <-ctx.Done():
		fresh.stop()
		return ctx.Err()
	}
	counts, err := fresh.view.Counts(ctx)
	if err != nil {
		fresh.stop()
		return err
	}
	if err := v.setCurrent(name); err != nil {
		fresh.stop()
		return err
	}
	v.current.Store(fresh)
	elapsed := time.Since(report.Started)
	v.mu.Lock()
	report.Events, report.Counts = fresh.view.Applied(), counts
	report.PerSec = float64(report.Events) / elapsed.Seconds()
	v.mu.Unlock()
	old.stop()
	removeViewFile(v.dir, old.file)
	v.app.logger.Info("task view rebuilt", "file", name, "events", report.Events, "took", elapsed.Round(time.Millisecond))
	return nil
}

// nextViewFile names the file after a view file: tasks-N.db is followed by
// tasks-N+1.db.
func nextViewFile(name string) string {
	n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(name, "tasks-"), ".db"))
	return "tasks-" + strconv.Itoa(n+1) + ".db"
}

// removeViewFile deletes a view file and its write-ahead log, if they
// exist.
func removeViewFile(dir, name string) {
	path := filepath.Join(dir, name)
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		_ = os.Remove(p)
	}
}
