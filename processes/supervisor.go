package processes

import (
	"container/heap"
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
)

// Supervisor finds attempts past their CompleteBy and records that they
// timed out, requesting what the step's policy says: a retry after the
// backoff, compensation, or Error. It also raises an alert for every task in
// Error. It never dispatches: the scheduler carries out what it requests.
//
// Several supervisors may run. Only the leader acts, but correctness never
// depends on the election: a timeout is appended on the revision it was
// decided on, so two supervisors can never both time out the same attempt.
type Supervisor struct {
	Store     EventStore
	Alerts    Alerts
	Workflows Workflows
	// Actor names this instance; it is the DetectedBy of its timeouts.
	Actor  string
	Clock  Clock
	Logger *slog.Logger
	// Interval between scans. Default 1 s.
	Interval time.Duration
	// Grace is how long past CompleteBy an attempt still has before it
	// times out, so that a reply sent at the last moment wins. Default 100 ms.
	Grace time.Duration
	// Leader says whether this instance may act; nil means always.
	Leader Leadership

	mu        sync.Mutex
	tasks     map[string]*domain.Task
	deadlines dueHeap[deadline]
	// failed holds the tasks in Error and the revision of their failure;
	// alerted what this instance has alerted.
	failed  map[string]*domain.Task
	alerted map[string]int64
	ready   chan struct{}
	once    sync.Once

	timeouts, conflicts, alerts atomic.Int64
}

// SupervisorStats counts what the supervisor did.
type SupervisorStats struct{ Timeouts, Conflicts, Alerts int64 }

// Stats returns the supervisor's counters.
func (s *Supervisor) Stats() SupervisorStats {
	return SupervisorStats{s.timeouts.Load(), s.conflicts.Load(), s.alerts.Load()}
}

type deadline struct {
	at           time.Time
	taskID, step string
	compensation bool
	attempt      int
}

// dueAt orders attempts in flight by CompleteBy. Entries whose attempt was
// answered stay until they surface and are dropped then.
func (d deadline) dueAt() time.Time { return d.at }

func (s *Supervisor) init() {
	s.once.Do(func() {
		s.tasks, s.failed, s.alerted = map[string]*domain.Task{}, map[string]*domain.Task{}, map[string]int64{}
		s.ready = make(chan struct{})
		if s.Interval <= 0 {
			s.Interval = time.Second
		}
		if s.Grace == 0 {
			s.Grace = 100 * time.Millisecond
		}
	})
}

// Ready is closed once the supervisor has caught up with the store.
func (s *Supervisor) Ready() <-chan struct{} {
	s.init()
	return s.ready
}

// Run follows the store and scans for timeouts until ctx ends.
func (s *Supervisor) Run(ctx context.Context) error {
	s.init()
	errs := make(chan error, 1)
	go func() {
		var caughtUp sync.Once
		errs <- s.Store.SubscribeAll(ctx, domain.FromStart(), domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
			if it.CaughtUp {
				caughtUp.Do(func() { close(s.ready) })
				return nil
			}
			s.apply(*it.Event)
			return nil
		})
	}()
	ticker := time.NewTicker(s.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if ctx.Err() != nil {
				return nil
			}
			return errors.Wrap(err, "supervisor subscription")
		case <-ticker.C:
			select {
			case <-s.ready:
			default:
				continue
			}
			if s.Leader != nil && !s.Leader.IsLeader() {
				continue
			}
			s.scan(ctx)
		}
	}
}

// apply folds a recorded event into the supervisor's view.
func (s *Supervisor) apply(e domain.RecordedEvent) {
	id, ok := domain.TaskIDFromStream(e.Stream)
	if !ok {
		return
	}
	ev, err := e.Decode()
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tasks[id]
	if t == nil {
		t = s.failed[id]
	}
	if t == nil {
		t = domain.NewTask(id)
	}
	if int64(e.Revision) <= t.Revision {
		return // this supervisor appended it and applied it already
	}
	t.Revision = int64(e.Revision) - 1
	if err != nil {
		s.Logger.Warn("supervisor cannot read a task event", "task", id, "revision", e.Revision, "err", err.Error())
		t.Revision++
	} else {
		t.Apply(ev)
	}
	s.track(t, ev)
}

// track files the task by its state and indexes a new attempt's deadline.
// The caller holds mu.
func (s *Supervisor) track(t *domain.Task, ev domain.Event) {
	switch {
	case t.State == domain.StateError:
		delete(s.tasks, t.ID)
		s.failed[t.ID] = t
		return
	case t.State.Terminal():
		delete(s.tasks, t.ID)
		delete(s.failed, t.ID)
		delete(s.alerted, t.ID)
		return
	}
	delete(s.failed, t.ID)
	s.tasks[t.ID] = t
	switch d := ev.(type) {
	case domain.StepDispatched:
		heap.Push(&s.deadlines, deadline{at: d.CompleteBy, taskID: t.ID, step: d.Step, attempt: d.Attempt})
	case domain.CompensationDispatched:
		heap.Push(&s.deadlines, deadline{at: d.CompleteBy, taskID: t.ID, step: d.Step, compensation: true, attempt: d.Attempt})
	}
}

type dueAttempt struct {
	task *domain.Task
	d    deadline
}

// scan times out the attempts that are due and alerts for tasks in Error.
func (s *Supervisor) scan(ctx context.Context) {
	now := s.Clock()
	var due []dueAttempt
	var alerts []*domain.Task
	s.mu.Lock()
	for len(s.deadlines) > 0 && !s.deadlines[0].at.Add(s.Grace).After(now) {
		d := heap.Pop(&s.deadlines).(deadline)
		if t := s.tasks[d.taskID]; t != nil {
			due = append(due, dueAttempt{task: t.Clone(), d: d})
		}
	}
	for id, t := range s.failed {
		if s.alerted[id] != t.Revision {
			alerts = append(alerts, t.Clone())
		}
	}
	s.mu.Unlock()

	for _, a := range due {
		if ctx.Err() != nil {
			return
		}
		s.timeOut(ctx, a, now)
	}
	for _, t := range alerts {
		s.alert(ctx, t)
	}
}

func (s *Supervisor) timeOut(ctx context.Context, a dueAttempt, now time.Time) {
	t, d := a.task, a.d
	wf, err := s.Workflows.Workflow(ctx, t.Workflow, t.WorkflowVersion)
	if err != nil {
		s.Logger.Error("supervisor cannot read the workflow of a task", "task", t.ID, "err", err.Error())
		return
	}
	events, err := t.TimeOut(wf, d.step, d.compensation, d.attempt, domain.Decision{Now: now, Actor: s.Actor, Random: rand.Float64()})
	if errors.Is(err, domain.ErrNotInFlight) {
		return // answered, or timed out already
	}
	if err != nil {
		s.Logger.Warn("supervisor timeout decision", "task", t.ID, "err", err.Error())
		return
	}
	batch, err := toNewEvents(events, domain.EventMetadata{CorrelationID: t.ID, CausationID: "timeout/" + d.step + "/" + itoa(int64(d.attempt)), Actor: s.Actor})
	if err != nil {
		s.Logger.Error("encode timeout", "err", err.Error())
		return
	}
	_, err = s.Store.Append(ctx, domain.TaskStream(t.ID), domain.ExpectAfter(t.Revision), batch...)
	if err != nil {
		if errors.Is(err, domain.ErrConcurrencyConflict) {
			s.conflicts.Add(1)
		} else {
			s.Logger.Error("append timeout", "task", t.ID, "err", err.Error())
		}
		// Look again at the next scan, on the state the subscription brings.
		s.mu.Lock()
		heap.Push(&s.deadlines, d)
		s.mu.Unlock()
		return
	}
	s.timeouts.Add(1)
	s.Logger.Info("attempt timed out", "task", t.ID, "step", d.step, "compensation", d.compensation, "attempt", d.attempt,
		"then", events[len(events)-1].EventType())
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.tasks[t.ID]; cur != nil && cur.Revision == t.Revision {
		for _, e := range events {
			cur.Apply(e)
			s.track(cur, e)
		}
	}
}

func (s *Supervisor) alert(ctx context.Context, t *domain.Task) {
	step := t.FailedStep
	a := domain.Alert{TaskID: t.ID, Workflow: t.Workflow, State: t.State, Step: step, Reason: t.Reason, Revision: t.Revision, At: t.UpdatedAt}
	if err := s.Alerts.RaiseAlert(ctx, a); err != nil {
		s.Logger.Error("raise alert", "task", t.ID, "err", err.Error())
		return
	}
	s.alerts.Add(1)
	s.Logger.Warn("task in Error: alert raised", "task", t.ID, "step", step, "reason", t.Reason)
	s.mu.Lock()
	s.alerted[t.ID] = t.Revision
	s.mu.Unlock()
}
