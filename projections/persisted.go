package projections

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// ErrBadCursor is returned for a page cursor the read model did not make.
var ErrBadCursor = errors.New("invalid page cursor")

// Paging limits of TaskQuery.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
	// DefaultPageBytes bounds the tasks' JSON on a page: a page of
	// MaxPageSize tasks of a few steps each is about 1 MiB.
	DefaultPageBytes = 4 << 20
)

// DefaultBatchSize bounds the events StoredTasks folds per commit.
const DefaultBatchSize = 512

// TaskQuery selects a page of tasks, newest submission first.
type TaskQuery struct {
	// State and Workflow filter when set.
	State    domain.TaskState
	Workflow string
	// Priority, when set, keeps the tasks of that priority (a view stored
	// without one is normal).
	Priority domain.Priority
	// Since and Until bound the submission time when set: since inclusive,
	// until exclusive.
	Since, Until time.Time
	// Step, when set, keeps the tasks at that step: one of their steps of
	// that name is in flight, retrying, in Error or being compensated (its
	// state is one of ActiveStepStates). For a task in Error it is the step
	// that failed.
	Step string
	// Reason, when set, keeps the tasks whose reason contains it, ignoring
	// ASCII case.
	Reason string
	// Limit is the page size: DefaultPageSize when 0, at most MaxPageSize.
	Limit int
	// MaxBytes bounds the size of a page's tasks (their JSON): the page
	// ends before the task that would pass it, but holds at least one;
	// DefaultPageBytes when 0.
	MaxBytes int
	// Cursor continues after the page that returned it.
	Cursor string
	// Raw asks for the tasks as their stored JSON (TaskPage.Raw, each a
	// protocol.TaskView), not decoded: what an API that passes them on
	// needs.
	Raw bool
	// RawBuffer, with Raw, is where the rows are copied (from its length
	// 0, growing it as needed), so that a caller can reuse one buffer for
	// many pages; TaskPage.RawBuffer returns it. Nil allocates one.
	RawBuffer []byte
}

// ActiveStepStates are the states of a step that a task is at
// (TaskQuery.Step): not waiting to start, not done.
var ActiveStepStates = []domain.StepState{domain.StepStateProcessing, domain.StepStateRetrying, domain.StepStateError,
	domain.StepStateCompensating, domain.StepStateAwaiting}

// MaxFilterLength bounds TaskQuery's Step and Reason.
const MaxFilterLength = 1024

// Matches reports whether a task passes the query's filters (not its
// cursor or limit). A TaskStore filters as it does; callers that must not
// act on a task outside the filter, whatever the server they asked, check
// with it too.
func (q TaskQuery) Matches(v *protocol.TaskView) bool {
	switch {
	case q.State != "" && v.State != q.State,
		q.Workflow != "" && v.Workflow != q.Workflow,
		q.Priority != "" && v.Priority.OrNormal() != q.Priority,
		!q.Since.IsZero() && v.SubmittedAt.Before(q.Since),
		!q.Until.IsZero() && !v.SubmittedAt.Before(q.Until),
		q.Reason != "" && !strings.Contains(asciiLower(v.Reason), asciiLower(q.Reason)):
		return false
	case q.Step == "":
		return true
	}
	for _, s := range v.Steps {
		if s.Name == q.Step && slices.Contains(ActiveStepStates, s.State) {
			return true
		}
	}
	return false
}

// asciiLower lowers ASCII letters only, as SQLite's lower() does.
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// TaskPage is one page of tasks.
type TaskPage struct {
	Tasks []*protocol.TaskView
	// Raw holds the tasks as stored JSON when the query asked for Raw.
	Raw []json.RawMessage
	// RawBuffer is the buffer Raw's rows are in (TaskQuery.RawBuffer, grown
	// as needed): the caller may reuse it once done with Raw.
	RawBuffer []byte
	// NextCursor continues with the next page; empty on the last one.
	NextCursor string
}

// TaskStore keeps the task view: a row per task, its protocol.TaskView (the
// state as the API shows it, which is also the state the projection folds
// the task's next events into), and the store position the rows are folded
// up to, changed together in one transaction, so that a crash never applies
// an event twice nor skips one. It is a disposable read model: deleting it
// makes the projection rebuild it from the store.
type TaskStore interface {
	// Checkpoint is the store position of the last event folded in, if any.
	Checkpoint(ctx context.Context) (position uint64, ok bool, err error)
	// Load returns the stored views of the tasks that exist among ids.
	Load(ctx context.Context, ids []string) (map[string]*protocol.TaskView, error)
	// Commit stores the tasks' views and the checkpoint at once.
	Commit(ctx context.Context, tasks []*protocol.TaskView, position uint64) error
	// Get returns one task.
	Get(ctx context.Context, id string) (*protocol.TaskView, bool, error)
	// List returns a page of tasks, each its protocol.TaskView.Summary
	// (no results: Get has them), bounded by q.Limit and q.MaxBytes.
	List(ctx context.Context, q TaskQuery) (TaskPage, error)
	// Counts returns how many tasks are in each state.
	Counts(ctx context.Context) (map[domain.TaskState]int, error)
}

// StoredTasks is the task view kept in a TaskStore: it follows the event
// store from the view's checkpoint and commits in batches, and it serves
// queries from the store, so neither its memory nor its start-up grow with
// history. It is safe for concurrent use.
type StoredTasks struct {
	Store  TaskStore
	Logger *slog.Logger
	// BatchSize bounds the events folded per commit; default
	// DefaultBatchSize.
	BatchSize int
	// FlushInterval bounds how long an event waits for its commit when
	// events arrive slowly; default 20 ms.
	FlushInterval time.Duration
	// CacheTasks bounds how many unfinished tasks the view keeps in memory
	// as last committed, so that their next events are folded without
	// reading and decoding their rows again; zero means DefaultCacheTasks,
	// a negative number none.
	CacheTasks int

	// MaxUpdateDelay bounds how long a change to a task that is neither
	// new nor finished waits in memory before the view writes it; zero
	// means DefaultMaxUpdateDelay, a negative number no wait. A new task
	// and a finished one are written at the next commit. Each row write
	// costs about the same however many events it folds, and a task in
	// flight changes at every step: written at every commit (every 20 ms
	// or so under load) a three-step task's row was written four times,
	// about half of the view's CPU; now about twice.
	MaxUpdateDelay time.Duration

	// RetryAfter is how long Follow waits after a failed run before it
	// runs again; default DefaultRetryAfter.
	RetryAfter time.Duration

	// cache holds tasks as last committed; only Run's goroutine uses it.
	cache map[string]*domain.Task
	// held are the tasks with changes not yet written, with when and in
	// which batch their first such change was folded; heldOrder lists
	// them oldest first (entries of tasks written since are passed over).
	// Only Run's goroutine uses them.
	held      map[string]*heldTask
	heldOrder []heldEntry
	// batches counts the batches folded; ends maps the number of each
	// batch since the oldest held change's to the position of its last
	// event, from which the checkpoint is found.
	batches uint64
	ends    map[uint64]uint64
	// written is the position the stored rows are complete up to.
	written uint64
	// heldCount and cachedCount are len(held) and len(cache), for Held.
	heldCount, cachedCount atomic.Int64
	// failure is the error of the last failed run, until the view commits
	// or catches up again.
	failure atomic.Pointer[error]

	applied, skipped atomic.Int64
	readyOnce        sync.Once
	ready            chan struct{}
	position         atomic.Uint64
}

// NewStoredTasks returns the view kept in store.
func NewStoredTasks(store TaskStore, logger *slog.Logger) *StoredTasks {
	return &StoredTasks{Store: store, Logger: logger, ready: make(chan struct{})}
}

// Ready is closed once the view has caught up with the event store.
func (v *StoredTasks) Ready() <-chan struct{} { return v.ready }

// Applied and Skipped count the events folded in and those passed over
// (already applied, or unreadable).
func (v *StoredTasks) Applied() int64 { return v.applied.Load() }

// Skipped counts the events passed over.
func (v *StoredTasks) Skipped() int64 { return v.skipped.Load() }

// Held is what the view holds in memory, by structure: the tasks whose
// changes wait to be written ("changes", bounded by the tasks in flight) and
// the unfinished tasks kept as last written ("cached", at most CacheTasks).
func (v *StoredTasks) Held() map[string]int {
	return map[string]int{"changes": int(v.heldCount.Load()), "cached": int(v.cachedCount.Load())}
}

// Position is the store position the view's stored rows are complete up
// to: every event at or before it is in the rows the view serves. Changes
// held back by MaxUpdateDelay are not.
func (v *StoredTasks) Position() uint64 { return v.position.Load() }

// DefaultMaxUpdateDelay is how long, by default, a change to a task in
// flight may wait before the view writes it (StoredTasks.MaxUpdateDelay).
const DefaultMaxUpdateDelay = 250 * time.Millisecond

// heldTask is a task whose folded changes the view has not written yet.
type heldTask struct {
	task *domain.Task
	// since is when its first unwritten change was folded, and batch the
	// number of the batch that held it.
	since time.Time
	batch uint64
}

// heldEntry is a task of heldOrder, as held at since.
type heldEntry struct {
	id    string
	since time.Time
}

// DefaultRetryAfter is how long StoredTasks.Follow waits between runs.
const DefaultRetryAfter = time.Second

// Failure is the error that stopped the view's last run (a commit the
// store refused: a full disk, say) while Follow waits to run again and
// until the view commits or catches up again; nil while all is well.
func (v *StoredTasks) Failure() error {
	if err := v.failure.Load(); err != nil {
		return *err
	}
	return nil
}

// Follow runs the view (Run) until ctx ends. A run that fails is run again
// after RetryAfter, from the view's checkpoint, so that the view recovers by
// itself once its store can write again (space freed on a full disk);
// meanwhile Failure says why it is behind and it serves what it committed.
func (v *StoredTasks) Follow(ctx context.Context, source EventSubscriber) error {
	wait := v.RetryAfter
	if wait <= 0 {
		wait = DefaultRetryAfter
	}
	for {
		err := v.Run(ctx, source)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("task view stopped")
		}
		v.failure.Store(&err)
		if v.Logger != nil {
			v.Logger.Warn("task view is behind: it runs again from its checkpoint", "after", wait, "err", err.Error())
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil
		}
	}
}

// Run follows the event store from the view's checkpoint until ctx ends.
func (v *StoredTasks) Run(ctx context.Context, source EventSubscriber) error {
	if v.BatchSize <= 0 {
		v.BatchSize = DefaultBatchSize
	}
	if v.FlushInterval <= 0 {
		v.FlushInterval = 20 * time.Millisecond
	}
	if v.MaxUpdateDelay == 0 {
		v.MaxUpdateDelay = DefaultMaxUpdateDelay
	}
	// A run starts from what is stored: changes held by an earlier run
	// are folded again from the checkpoint, which never passed them.
	v.held, v.heldOrder, v.ends, v.batches, v.written = map[string]*heldTask{}, nil, map[uint64]uint64{}, 0, 0
	from := domain.FromStart()
	if pos, ok, err := v.Store.Checkpoint(ctx); err != nil {
		return errors.Wrap(err, "read the task view's checkpoint")
	} else if ok {
		from = domain.AfterPosition(pos)
		v.position.Store(pos)
		v.written = pos
	}
	items := make(chan domain.SubscriptionItem, v.BatchSize)
	subErr := make(chan error, 1)
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		subErr <- source.SubscribeAll(subCtx, from, domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
			select {
			case items <- it:
				return nil
			case <-subCtx.Done():
				return subCtx.Err()
			}
		})
	}()
	b := &viewBatch{tasks: map[string]*domain.Task{}}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-subErr:
			if ctx.Err() != nil {
				return nil
			}
			return errors.Wrap(err, "task view subscription")
		case it := <-items:
			if it.CaughtUp {
				// Caught up, the rows hold everything: held changes too.
				if err := v.flush(ctx, b, true); err != nil {
					return err
				}
				v.failure.Store(nil)
				v.readyOnce.Do(func() { close(v.ready) })
				continue
			}
			if len(b.events) == 0 {
				timer.Reset(v.FlushInterval)
			}
			b.events = append(b.events, *it.Event)
			if len(b.events) >= v.BatchSize {
				if err := v.flush(ctx, b, false); err != nil {
					return err
				}
			}
		case <-timer.C:
			if err := v.flush(ctx, b, false); err != nil {
				return err
			}
			if len(v.held) > 0 {
				// Held changes are written when their delay ends, even
				// if no event comes meanwhile.
				timer.Reset(v.FlushInterval)
			}
		}
	}
}

// DefaultCacheTasks is how many unfinished tasks a StoredTasks keeps in
// memory by default: the tasks in flight at several hundred orders a
// second, at a few KiB each.
const DefaultCacheTasks = 4096

// viewBatch collects the events of one commit.
type viewBatch struct {
	events []domain.RecordedEvent
	tasks  map[string]*domain.Task
}

// flush folds the batch's events into their tasks' stored states and
// commits the tasks that are new or finished or whose changes have waited
// MaxUpdateDelay (all of them when all is set), with the position the rows
// are then complete up to. The other changed tasks are held in memory until
// their turn; the checkpoint stays before their first unwritten event, so a
// restart folds those events again.
func (v *StoredTasks) flush(ctx context.Context, b *viewBatch, all bool) error {
	if len(b.events) == 0 && len(v.held) == 0 {
		return nil
	}
	now := time.Now()
	var ids []string
	seen := map[string]bool{}
	for _, e := range b.events {
		if id, ok := domain.TaskIDFromStream(e.Stream); ok && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	stored := map[string]bool{}
	var missing []string
	for _, id := range ids {
		if h, ok := v.held[id]; ok {
			b.tasks[id], stored[id] = h.task, true // held only once stored
		} else if t, ok := v.cache[id]; ok {
			b.tasks[id], stored[id] = t, true
		} else {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		rows, err := v.Store.Load(ctx, missing)
		if err != nil {
			return errors.Wrap(err, "load tasks for the task view")
		}
		for _, id := range missing {
			t := domain.NewTask(id)
			if v := rows[id]; v != nil {
				t, stored[id] = v.Task(), true
			}
			b.tasks[id] = t
		}
	}
	var applied, skipped int64
	for _, e := range b.events {
		id, ok := domain.TaskIDFromStream(e.Stream)
		if !ok {
			continue
		}
		if foldInto(b.tasks[id], e, v.Logger) {
			applied++
		} else {
			skipped++
		}
	}
	if len(b.events) > 0 {
		v.batches++
		v.ends[v.batches] = b.events[len(b.events)-1].Position
	}
	changed := make([]*protocol.TaskView, 0, len(ids))
	written := map[string]*domain.Task{}
	write := func(id string, t *domain.Task) {
		if _, done := written[id]; !done && t.Exists() {
			changed = append(changed, protocol.ViewOf(t))
		}
		written[id] = t
	}
	for _, id := range ids {
		t := b.tasks[id]
		h, isHeld := v.held[id]
		switch {
		case all || v.MaxUpdateDelay < 0 || !stored[id] || t.State.Terminal() || isHeld && now.Sub(h.since) >= v.MaxUpdateDelay:
			write(id, t)
		case !isHeld:
			v.held[id] = &heldTask{task: t, since: now, batch: v.batches}
			v.heldOrder = append(v.heldOrder, heldEntry{id: id, since: now})
		}
	}
	// Held tasks whose delay ended, or every one when all is set.
	n := 0
	for _, e := range v.heldOrder {
		h, ok := v.held[e.id]
		if _, done := written[e.id]; !ok || !h.since.Equal(e.since) || done {
			n++ // written since
			continue
		}
		if !all && now.Sub(h.since) < v.MaxUpdateDelay {
			break
		}
		write(e.id, h.task)
		n++
	}
	// Without held changes the rows are complete up to the last event
	// folded.
	complete := v.written
	if end, ok := v.ends[v.batches]; ok {
		complete = end
	}
	oldest := uint64(0)
	for _, e := range v.heldOrder[n:] {
		if h, ok := v.held[e.id]; ok && written[e.id] == nil && h.since.Equal(e.since) {
			oldest = h.batch
			break
		}
	}
	if oldest > 0 {
		// The rows are complete up to the batch before the oldest
		// unwritten change; before any batch of this run, up to where it
		// started.
		complete = v.written
		if end, ok := v.ends[oldest-1]; ok {
			complete = end
		}
	}
	defer func() { v.heldCount.Store(int64(len(v.held))); v.cachedCount.Store(int64(len(v.cache))) }()
	if len(changed) == 0 && complete == v.written {
		v.forgetWritten(written, n, oldest)
		v.applied.Add(applied)
		v.skipped.Add(skipped)
		b.events = b.events[:0]
		clear(b.tasks)
		return nil
	}
	if err := v.Store.Commit(ctx, changed, complete); err != nil {
		// The cached and held tasks may now hold events the store does
		// not; the next run folds them again from the checkpoint.
		clear(v.cache)
		clear(v.held)
		v.heldOrder = nil
		return errors.Wrap(err, "commit the task view")
	}
	v.failure.Store(nil)
	v.forgetWritten(written, n, oldest)
	v.remember(written)
	v.applied.Add(applied)
	v.skipped.Add(skipped)
	v.written = complete
	v.position.Store(complete)
	b.events = b.events[:0]
	clear(b.tasks)
	return nil
}

// forgetWritten drops what the view no longer holds: the tasks just written,
// the first n entries of heldOrder, and the batch ends before the oldest
// held change's batch (all of them when nothing is held).
func (v *StoredTasks) forgetWritten(written map[string]*domain.Task, n int, oldest uint64) {
	for id := range written {
		delete(v.held, id)
	}
	v.heldOrder = v.heldOrder[n:]
	if len(v.heldOrder) == 0 {
		v.heldOrder = nil
	}
	for k := range v.ends {
		if oldest == 0 && k < v.batches || oldest > 0 && k+1 < oldest {
			delete(v.ends, k)
		}
	}
}

// remember keeps the unfinished tasks of a committed batch in the cache and
// drops the finished ones, which rarely change again. When the cache is
// full, tasks are dropped in no particular order: a task not cached is
// read from the store, which is only slower.
func (v *StoredTasks) remember(tasks map[string]*domain.Task) {
	if v.CacheTasks < 0 {
		return
	}
	if v.cache == nil {
		v.cache = map[string]*domain.Task{}
	}
	limit := v.CacheTasks
	if limit <= 0 {
		limit = DefaultCacheTasks
	}
	for id, t := range tasks {
		if !t.Exists() || t.State.Terminal() {
			delete(v.cache, id)
			continue
		}
		if _, ok := v.cache[id]; !ok && len(v.cache) >= limit {
			for other := range v.cache {
				delete(v.cache, other)
				break
			}
		}
		v.cache[id] = t
	}
}

// foldInto applies a recorded event to a task's view state with the one
// fold of stored events (domain.Task.ApplyRecorded) and reports whether it
// did: an event already applied is passed over, so that a replay is
// idempotent.
//
// Where the decisions' policy stops, the view goes on, as it always did: an
// event this version cannot read is passed over (logged, and counted by
// the caller as skipped), and the task's later events are folded. A view
// decides nothing, and stopping would leave the API showing the task as it
// was before that event for as long as this version runs (in a rolling
// upgrade, until the instance is replaced). Likewise a gap, which one
// subscription committed with its checkpoint never leaves, is folded over:
// the view cannot read a stream again.
func foldInto(t *domain.Task, e domain.RecordedEvent, logger *slog.Logger) bool {
	if rev := int64(e.Revision); rev > t.Revision+1 {
		t.Revision = rev - 1
	}
	ev, err := t.ApplyRecorded(&e)
	switch {
	case err != nil:
		if logger != nil {
			logger.Warn("task view passed over an event it cannot read", "stream", e.Stream, "revision", e.Revision, "err", err.Error())
		}
		t.Revision = int64(e.Revision)
		return false
	case ev == nil:
		return false
	}
	t.Order = nil // the order's body stays in the store; the view does not serve it
	return true
}

// Get returns a task's current state.
func (v *StoredTasks) Get(ctx context.Context, id string) (*protocol.TaskView, bool, error) {
	return v.Store.Get(ctx, id)
}

// List returns a page of tasks.
func (v *StoredTasks) List(ctx context.Context, q TaskQuery) (TaskPage, error) {
	return v.Store.List(ctx, q)
}

// Counts returns how many tasks are in each state.
func (v *StoredTasks) Counts(ctx context.Context) (map[domain.TaskState]int, error) {
	return v.Store.Counts(ctx)
}
