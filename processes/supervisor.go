package processes

import (
	"cmp"
	"container/heap"
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/internal/tracing"
)

// Supervisor finds attempts past their CompleteBy and records that they
// timed out, requesting what the step's policy says: a retry after the
// backoff, compensation, or Error. It also raises an alert for every task in
// Error. It never dispatches: the scheduler carries out what it requests.
//
// Several supervisors may run. Only the leader acts, but correctness never
// depends on the election: a timeout is appended on the revision it was
// decided on, so two supervisors can never both time out the same attempt.
// With Terms, the leader acts in a lease term (a fencing token) recorded in
// its timeouts, and a task refuses a timeout of an older term than one it
// recorded, so an old leader that still acts (paused, or cut off, with
// timers that lie) cannot undo what a newer one decided. A leader that
// cannot reach the event store stands down (StoreTimeout).
//
// It keeps in memory only unfinished tasks and tasks in Error. With
// Checkpoints it resumes from the newest task checkpoint, as the scheduler
// does: it reads the streams of the tasks the checkpoint names and follows
// the store after it; a task it does not know that has a new event is read
// then.
type Supervisor struct {
	Store     EventStore
	Alerts    Alerts
	Workflows Workflows
	// Actor names this instance; it is the DetectedBy of its timeouts.
	Actor  string
	Clock  Clock
	Logger *slog.Logger
	// Interval between scans. Default DefaultSupervisorInterval.
	Interval time.Duration
	// Grace is how long past CompleteBy an attempt still has before it
	// times out, so that a reply sent at the last moment wins. Default
	// DefaultSupervisorGrace.
	Grace time.Duration
	// Leader says whether this instance may act; nil means always. When it
	// is a Candidacy, the supervisor stands down from the election while
	// the event store does not answer (StoreTimeout), and begins a new
	// term (Terms) at each new tenure.
	Leader Leadership
	// Terms, when set, numbers the supervisor's leaderships: it begins a
	// term each time it takes the lease, acts only within one, and records
	// it in every StepTimedOut it appends (domain.Task.TimeOutInTerm). Nil
	// means no terms.
	Terms LeaseTerms
	// StoreTimeout is how long a supervisor whose Leader is a Candidacy
	// goes without an answer from the event store (it reads it at every
	// scan) before it stands down, so that a standby that reaches the
	// store leads; it stands again once the store answers. It also bounds
	// each action's wait for the store. It must be at least Interval.
	// Default DefaultSupervisorStoreTimeout, or the interval when that is
	// longer.
	StoreTimeout time.Duration
	// Checkpoints, when set, keep the supervisor's task checkpoints, shared
	// by every supervisor instance under CheckpointName; nil means follow
	// the store from the start at every start.
	Checkpoints TaskCheckpoints
	// CheckpointName names the checkpoint. Default
	// DefaultSupervisorCheckpoint.
	CheckpointName string
	// CheckpointEvery bounds the time between checkpoints while events
	// arrive. Default DefaultTaskCheckpointEvery.
	CheckpointEvery time.Duration
	// Observer, when set, hears of the tasks its timeouts finish.
	Observer Observer
	// Tracing starts the spans of timeouts (SpanTimeout); nil means the
	// global TracerProvider.
	Tracing trace.TracerProvider

	repo *TaskRepository
	// interval, grace, checkpointName and checkpointEvery are the
	// settings in effect (init).
	interval, grace, checkpointEvery, storeTimeout time.Duration
	checkpointName                                 string
	mu                                             sync.Mutex
	tasks                                          map[string]*domain.Task
	deadlines                                      dueHeap[deadline]
	// timers index the delay steps waiting, by the time they wait until
	// (supervisor_delay.go).
	timers dueHeap[delayTimer]
	// failed holds the tasks in Error and the revision of their failure;
	// alerted what this instance has alerted.
	failed  map[string]*domain.Task
	alerted map[string]int64
	ready   chan struct{}
	once    sync.Once

	// unsure holds the tasks whose stream could not be read; checkpoints
	// name them until a read succeeds. Under mu.
	unsure map[string]struct{}

	timeouts, conflicts, alerts          atomic.Int64
	delaysElapsed                        atomic.Int64
	startLoads, startEvents, checkpoints atomic.Int64

	// term is the lease term the supervisor acts in, 0 when none.
	term atomic.Int64
	// The leadership's state, kept by Run's goroutine alone: when the
	// store last answered (Clock), whether the supervisor stood down for
	// want of it, whether it acts in a term, whether an action of the
	// scan under way gave up waiting for the store, and the tenure of the
	// lease its term began in.
	storeOK                        time.Time
	stoodDown, inTerm, storeSilent bool
	tenure                         uint64
	staleTerms, downs              atomic.Int64
}

// SupervisorStats counts what the supervisor did.
type SupervisorStats struct {
	Timeouts, Conflicts, Alerts int64
	// StartLoads, StartEvents and Checkpoints count as the scheduler's
	// do: task streams read at start, events before caught up, checkpoints
	// saved.
	StartLoads, StartEvents, Checkpoints int64
	// LeaseTerm is the lease term the supervisor acts in now, 0 when it
	// does not lead (or has no Terms).
	LeaseTerm int64
	// StaleTerms counts timeouts a task refused because a newer lease
	// term had acted on it (domain.ErrStaleLeaseTerm).
	StaleTerms int64
	// StandDowns counts the times the supervisor left the election because
	// the event store did not answer.
	StandDowns int64
	// DelaysElapsed counts the delay steps the supervisor fired.
	DelaysElapsed int64
}

// Stats returns the supervisor's counters.
func (s *Supervisor) Stats() SupervisorStats {
	return SupervisorStats{Timeouts: s.timeouts.Load(), Conflicts: s.conflicts.Load(), Alerts: s.alerts.Load(),
		StartLoads: s.startLoads.Load(), StartEvents: s.startEvents.Load(), Checkpoints: s.checkpoints.Load(),
		LeaseTerm: s.term.Load(), StaleTerms: s.staleTerms.Load(), StandDowns: s.downs.Load(),
		DelaysElapsed: s.delaysElapsed.Load()}
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
		s.unsure = map[string]struct{}{}
		s.ready = make(chan struct{})
		// The settings in effect, defaults filled in, in fields of their
		// own: the public ones are the caller's and are only read, so
		// that Ready and Run may race.
		s.interval, s.grace, s.checkpointName, s.checkpointEvery = s.Interval, s.Grace, s.CheckpointName, s.CheckpointEvery
		if s.interval <= 0 {
			s.interval = DefaultSupervisorInterval
		}
		s.storeTimeout = cmp.Or(s.StoreTimeout, max(DefaultSupervisorStoreTimeout, s.interval))
		if s.grace == 0 {
			s.grace = DefaultSupervisorGrace
		}
		if s.checkpointName == "" {
			s.checkpointName = DefaultSupervisorCheckpoint
		}
		if s.checkpointEvery <= 0 {
			s.checkpointEvery = DefaultTaskCheckpointEvery
		}
	})
}

// Ready is closed once the supervisor has caught up with the store.
func (s *Supervisor) Ready() <-chan struct{} {
	s.init()
	return s.ready
}

// Run follows the store and scans for timeouts until ctx ends. It refuses
// to start with an invalid configuration (Validate).
func (s *Supervisor) Run(ctx context.Context) error {
	if err := s.Validate(); err != nil {
		return err
	}
	s.init()
	s.repo = NewTaskRepository(s.Store)
	s.repo.Observer = s.Observer
	from := domain.FromStart()
	cps := &checkpointer{}
	if s.Checkpoints != nil {
		if cp, ok := resumePoint(ctx, s.Checkpoints, s.checkpointName, s.Logger); ok {
			s.resumeFrom(ctx, cp)
			from = domain.AfterPosition(cp.Position)
		}
		cps = &checkpointer{every: s.checkpointEvery, lastSave: time.Now(), snapshot: s.snapshot}
		go cps.ticking(ctx)
	}
	errs := make(chan error, 1)
	go func() {
		var caughtUp sync.Once
		live := false
		errs <- s.Store.SubscribeAll(ctx, from, domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
			if it.CaughtUp {
				caughtUp.Do(func() { close(s.ready) })
				live = true
				return cps.caughtUp(ctx)
			}
			if !live {
				s.startEvents.Add(1)
			}
			s.apply(ctx, *it.Event)
			return cps.handled(ctx, it.Event.Position)
		})
	}()
	timer := s.Clock.NewTimer(s.interval)
	defer timer.Stop()
	s.storeOK = s.Clock.Now()
	defer s.endTerm("the supervisor stopped")
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if ctx.Err() != nil {
				return nil
			}
			return errors.Wrap(err, "supervisor subscription")
		case <-timer.C():
			timer.Reset(s.interval)
			// Before it has caught up too: a leader that cannot reach
			// the store at start must not keep the lease. A scan the
			// store did not answer for acts on nothing.
			answered := s.checkStore(ctx)
			select {
			case <-s.ready:
			default:
				continue
			}
			if !answered {
				continue
			}
			if !s.mayAct(ctx) {
				continue
			}
			s.scan(ctx)
		}
	}
}

// resumeFrom loads the tasks a checkpoint names, with the deadlines of
// their attempts in flight.
func (s *Supervisor) resumeFrom(ctx context.Context, cp domain.TaskCheckpoint) {
	began := time.Now()
	tasks, unread := loadTasks(ctx, s.repo, cp.Tasks, s.Logger)
	s.startLoads.Add(int64(len(cp.Tasks)))
	s.mu.Lock()
	for _, t := range tasks {
		s.file(t)
	}
	for _, id := range unread {
		s.unsure[id] = struct{}{}
	}
	s.mu.Unlock()
	s.Logger.Info("supervisor resumes from its checkpoint", "position", cp.Position, "tasks", len(cp.Tasks),
		"took", time.Since(began).Round(time.Millisecond))
}

// file keeps a task read from its stream, indexing the deadlines of its
// attempts in flight. The caller holds mu.
func (s *Supervisor) file(t *domain.Task) {
	s.track(t, nil)
	if s.tasks[t.ID] != t {
		return
	}
	for _, a := range append(t.InFlight(), t.Awaits()...) {
		heap.Push(&s.deadlines, deadline{at: a.CompleteBy, taskID: t.ID, step: a.Step, compensation: a.Compensation, attempt: a.Attempt})
	}
	s.fileDelays(t)
}

// snapshot captures the tasks the supervisor keeps (unfinished and in
// Error, and those it could not read) once it has applied the event at
// position; it may have applied more. Tasks that went final past position
// (by the supervisor's own appends, say) have events after it and come
// back on demand, so the set names every task unfinished at position with
// nothing after it.
func (s *Supervisor) snapshot(_ context.Context, position uint64) (func(), error) {
	cp := domain.TaskCheckpoint{Position: position}
	s.mu.Lock()
	for id := range s.tasks {
		cp.Tasks = append(cp.Tasks, id)
	}
	for id := range s.failed {
		cp.Tasks = append(cp.Tasks, id)
	}
	for id := range s.unsure {
		cp.Tasks = append(cp.Tasks, id)
	}
	s.mu.Unlock()
	return func() {
		if saveTaskCheckpoint(context.Background(), s.Checkpoints, s.checkpointName, cp, s.Logger) {
			s.checkpoints.Add(1)
		}
	}, nil
}

// known returns the task kept under id, if any. The caller holds mu.
func (s *Supervisor) known(id string) *domain.Task {
	if t := s.tasks[id]; t != nil {
		return t
	}
	return s.failed[id]
}

// apply folds a recorded event into the supervisor's view. An event of a
// task it does not know, other than the first, makes it read the task's
// stream: the task started before the checkpoint it resumed from, or went
// final and came back (an operator's retry).
func (s *Supervisor) apply(ctx context.Context, e domain.RecordedEvent) {
	id, ok := domain.TaskIDFromStream(e.Stream)
	if !ok {
		return
	}
	s.mu.Lock()
	t := s.known(id)
	if t == nil {
		if _, unsure := s.unsure[id]; !unsure && e.Revision == 0 {
			t = domain.NewTask(id)
		}
	}
	if t != nil {
		ev, err := t.ApplyRecorded(&e)
		switch {
		case err == nil:
			if ev != nil {
				s.track(t, ev)
			}
			s.mu.Unlock()
			return
		case !errors.Is(err, domain.ErrRevisionGap):
			s.unreadable(id, err)
			s.mu.Unlock()
			return
		}
	}
	s.mu.Unlock()
	// A task it does not know, or one it missed events of: read it. Only
	// this goroutine folds events, so none of the task's is folded
	// meanwhile; an append of the supervisor's own that the read misses
	// is delivered after it.
	read, err := s.repo.Load(ctx, id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.unreadable(id, err)
		return
	}
	delete(s.unsure, id)
	delete(s.tasks, id)
	delete(s.failed, id)
	if read.Exists() {
		s.file(read)
	}
}

// unreadable notes a task whose stream could not be read or folded:
// checkpoints name it until a read succeeds. A task with an event this
// version cannot read is forgotten, so nothing is decided for it. The
// caller holds mu.
func (s *Supervisor) unreadable(id string, err error) {
	s.Logger.Error("supervisor cannot read a task", "task_id", id, "err", err.Error())
	if errors.Is(err, domain.ErrUnreadableEvent) {
		delete(s.tasks, id)
		delete(s.failed, id)
	}
	s.unsure[id] = struct{}{}
}

// track files the task by its state and indexes a new attempt's deadline
// (ev may be nil). The caller holds mu.
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
		s.pruneDeadlines()
		return
	}
	delete(s.failed, t.ID)
	s.tasks[t.ID] = t
	switch d := ev.(type) {
	case domain.StepDispatched:
		heap.Push(&s.deadlines, deadline{at: d.CompleteBy, taskID: t.ID, step: d.Step, attempt: d.Attempt})
	case domain.CompensationDispatched:
		heap.Push(&s.deadlines, deadline{at: d.CompleteBy, taskID: t.ID, step: d.Step, compensation: true, attempt: d.Attempt})
	case domain.StepAwaiting:
		// An await's deadline is timed out like an attempt's.
		heap.Push(&s.deadlines, deadline{at: d.Until, taskID: t.ID, step: d.Step, attempt: d.Attempt})
	case domain.StepDelayed:
		heap.Push(&s.timers, delayTimer{at: d.Until, taskID: t.ID, step: d.Step})
	}
}

// minPrune is the size of the deadline index below which it is never
// pruned.
const minPrune = 1024

// pruneDeadlines drops the deadlines of tasks no longer tracked once they
// are most of the index. A deadline is indexed when its attempt is
// dispatched and otherwise leaves only when it falls due, so without this
// the index would hold every attempt of the last budget's length: memory
// that grows with the rate and the budgets (a 15-minute budget at 1,000
// attempts a second is 900,000 entries) rather than with the work in
// flight. Pruning only when three quarters are stale keeps its cost
// constant per attempt. The caller holds mu.
func (s *Supervisor) pruneDeadlines() {
	s.pruneTimers()
	if len(s.deadlines) < minPrune || len(s.deadlines) < 4*len(s.tasks) {
		return
	}
	kept := s.deadlines[:0]
	for _, d := range s.deadlines {
		if s.tasks[d.taskID] != nil {
			kept = append(kept, d)
		}
	}
	clear(s.deadlines[len(kept):])
	s.deadlines = kept
	heap.Init(&s.deadlines)
}

// Held is what the supervisor holds in memory, by structure: the tasks it
// follows, the deadlines it indexes, the tasks in Error and those it
// alerted for. Each is bounded by the work in flight, not by history.
func (s *Supervisor) Held() Held {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Held{"tasks": len(s.tasks), "deadlines": len(s.deadlines), "timers": len(s.timers), "failed": len(s.failed), "alerted": len(s.alerted), "unsure": len(s.unsure)}
}

type dueAttempt struct {
	task *domain.Task
	d    deadline
}

// scan times out the attempts that are due and alerts for tasks in Error.
func (s *Supervisor) scan(ctx context.Context) {
	s.storeSilent = false
	now := s.Clock.Now()
	var due []dueAttempt
	var alerts []*domain.Task
	s.mu.Lock()
	for len(s.deadlines) > 0 && !s.deadlines[0].at.Add(s.grace).After(now) {
		d := heap.Pop(&s.deadlines).(deadline)
		if t := s.tasks[d.taskID]; t != nil {
			due = append(due, dueAttempt{task: t.Clone(), d: d})
		}
	}
	timers := s.dueTimers(now)
	for id, t := range s.failed {
		if s.alerted[id] != t.Revision {
			alerts = append(alerts, t.Clone())
		}
	}
	s.mu.Unlock()

	for _, a := range due {
		// A lease can lapse during a long scan: ask before each action,
		// not only before the scan. What is left goes back for the next.
		if ctx.Err() != nil || s.storeSilent || !s.stillLeads() {
			s.mu.Lock()
			for _, rest := range due {
				heap.Push(&s.deadlines, rest.d)
			}
			s.requeueTimers(timers)
			s.mu.Unlock()
			return
		}
		due = due[1:]
		s.timeOut(ctx, a, now)
	}
	if !s.fireDelays(ctx, timers, now) {
		return
	}
	for _, t := range alerts {
		s.alert(ctx, t)
	}
}

// timeOut decides and records that an attempt timed out, through the task
// repository: from the supervisor's own state of the task, and after a
// conflict from a fresh read (another supervisor may have timed it out
// already, which then decides nothing).
func (s *Supervisor) timeOut(ctx context.Context, a dueAttempt, now time.Time) {
	t, d := a.task, a.d
	known := t.Revision
	action := protocol.ActionExecute
	if d.compensation {
		action = protocol.ActionCompensate
	}
	ctx, span := tracing.Tracer(s.Tracing).Start(tracing.WithTraceParent(ctx, t.TraceParent), SpanTimeout, trace.WithAttributes(AttrTaskID.String(t.ID),
		AttrWorkflow.String(t.Workflow), AttrStep.String(d.step), AttrAction.String(action), AttrAttempt.Int(d.attempt)))
	defer span.End()
	log := tracing.TaskLogger(ctx, s.Logger, t.ID)
	meta := domain.EventMetadata{CausationID: "timeout/" + d.step + "/" + itoa(int64(d.attempt)), Actor: s.Actor, TraceParent: tracing.StoredTraceParent(ctx)}
	term := s.term.Load()
	// An event store that stops answering must not hold the scan, and the
	// lease with it: the action gives up after StoreTimeout.
	bounded, cancel := context.WithTimeout(ctx, s.storeTimeout)
	defer cancel()
	u, err := s.repo.Update(bounded, t.ID, t, meta, func(t *domain.Task) ([]domain.Event, error) {
		wf, err := s.Workflows.Workflow(bounded, t.Workflow, t.WorkflowVersion)
		if err != nil {
			return nil, errors.Wrap(err, "read the workflow of a task")
		}
		return t.TimeOutInTerm(wf, d.step, d.compensation, d.attempt, term, domain.Decision{Now: now, Actor: s.Actor, Random: rand.Float64()})
	})
	s.conflicts.Add(int64(u.Conflicts))
	switch {
	case errors.Is(err, domain.ErrStaleLeaseTerm):
		// A newer leader acted on the task: this one's lease, clock or
		// timers cannot be trusted. The attempt is left to the newer
		// one, and looked at again should this one lead in a newer term.
		s.staleTerms.Add(1)
		span.SetAttributes(AttrOutcome.String("stale lease term"))
		log.Warn("supervisor timeout refused: a newer lease term acted on the task", "step", d.step, "attempt", d.attempt,
			"lease_term", term, "err", err.Error())
		s.mu.Lock()
		heap.Push(&s.deadlines, d)
		s.mu.Unlock()
		return
	case errors.Is(err, domain.ErrNotInFlight), err == nil && len(u.Events) == 0:
		span.SetAttributes(AttrOutcome.String("answered"))
		return // answered, or timed out already
	case errors.Is(err, domain.ErrNotDue):
		// The attempt was given back and dispatched again, with a later
		// complete-by: that dispatch's own deadline times it out.
		span.SetAttributes(AttrOutcome.String("dispatched again"))
		return
	case err != nil:
		tracing.FailSpan(span, err)
		if ctx.Err() == nil {
			log.Error("supervisor timeout", "err", err.Error())
		}
		if bounded.Err() != nil {
			s.storeSilent = true // the rest of the scan waits for the store
		}
		// Look again at the next scan.
		s.mu.Lock()
		heap.Push(&s.deadlines, d)
		s.mu.Unlock()
		return
	}
	s.timeouts.Add(1)
	then := u.Events[len(u.Events)-1].EventType()
	span.SetAttributes(AttrOutcome.String(then))
	log.Info("attempt timed out", "step", d.step, "compensation", d.compensation, "attempt", d.attempt, "then", then)
	if u.Read {
		return // the subscription brings the events it read past the supervisor's state
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.tasks[t.ID]; cur != nil && cur.Revision == known {
		for _, e := range u.Events {
			cur.Apply(e)
			s.track(cur, e)
		}
	}
}

func (s *Supervisor) alert(ctx context.Context, t *domain.Task) {
	step := t.FailedStep
	a := protocol.RaisedAlert(t)
	log := tracing.TaskLogger(tracing.WithTraceParent(ctx, t.TraceParent), s.Logger, t.ID)
	if err := s.Alerts.RaiseAlert(ctx, a); err != nil {
		log.Error("raise alert", "err", err.Error())
		return
	}
	s.alerts.Add(1)
	log.Warn("task in Error: alert raised", "step", step, "reason", t.Reason)
	s.mu.Lock()
	s.alerted[t.ID] = t.Revision
	s.mu.Unlock()
}

// storeProbeStream is the stream a supervisor reads to learn whether the
// event store answers; nothing writes it.
const storeProbeStream = "supervisor-store-probe"

// checkStore reads the store, when the supervisor can stand down from its
// election: once the store has not answered for StoreTimeout it stands
// down, so that a standby that reaches the store leads, and it stands
// again once the store answers. It reports whether the store answered
// (always yes when the supervisor cannot stand down, and does not ask).
func (s *Supervisor) checkStore(ctx context.Context) (answered bool) {
	c, ok := s.Leader.(Candidacy)
	if !ok {
		return true
	}
	probe, cancel := context.WithTimeout(ctx, s.storeTimeout)
	_, err := s.Store.ReadStream(probe, storeProbeStream)
	cancel()
	now := s.Clock.Now()
	switch {
	case ctx.Err() != nil:
	case err == nil:
		answered = true
		s.storeOK = now
		if s.stoodDown {
			s.stoodDown = false
			c.StandAgain()
			s.Logger.Info("the event store answers again: the supervisor stands for the lease again")
		}
	case !s.stoodDown && now.Sub(s.storeOK) >= s.storeTimeout:
		s.stoodDown = true
		s.downs.Add(1)
		s.endTerm("the event store does not answer")
		c.StandDown()
		s.Logger.Warn("supervisor stands down: the event store has not answered; another supervisor may lead",
			"since_last_answer", now.Sub(s.storeOK).String(), "store_timeout", s.storeTimeout.String(), "err", err.Error())
	}
	return answered
}

// tenureNow is the tenure of the lease, 0 when Leader does not tell.
func (s *Supervisor) tenureNow() uint64 {
	if c, ok := s.Leader.(Candidacy); ok {
		return c.Tenure()
	}
	return 0
}

// stillLeads reports whether the supervisor still holds the lease, in the
// tenure its term began in.
func (s *Supervisor) stillLeads() bool {
	if s.Leader == nil {
		return true
	}
	return s.Leader.IsLeader() && (s.Terms == nil || s.tenureNow() == s.tenure)
}

// mayAct reports whether the supervisor leads, beginning a lease term when
// it took the lease anew. A term it cannot begin (the store does not
// answer) means it does not act.
func (s *Supervisor) mayAct(ctx context.Context) bool {
	if s.Leader != nil && !s.Leader.IsLeader() {
		s.endTerm("the lease was lost")
		return false
	}
	if s.Terms == nil {
		return true
	}
	tenure := s.tenureNow()
	if s.inTerm && tenure == s.tenure {
		return true
	}
	s.endTerm("the lease was taken anew")
	at := s.Clock.Now()
	bounded, cancel := context.WithTimeout(ctx, s.storeTimeout)
	term, err := s.Terms.BeginTerm(bounded, s.Actor, at)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.Logger.Error("supervisor cannot begin a lease term: not acting", "err", err.Error())
		}
		return false
	}
	s.storeOK = s.Clock.Now()
	s.inTerm, s.tenure = true, tenure
	s.term.Store(term)
	s.Logger.Info(LogLeaseTermBegan, "lease_term", term, "actor", s.Actor, "at", at.UTC().Format(time.RFC3339Nano))
	return true
}

// endTerm ends the lease term the supervisor acts in, if any.
func (s *Supervisor) endTerm(reason string) {
	if !s.inTerm {
		return
	}
	term := s.term.Swap(0)
	s.inTerm = false
	s.Logger.Info(LogLeaseTermEnded, "lease_term", term, "actor", s.Actor, "at", s.Clock.Now().UTC().Format(time.RFC3339Nano), "reason", reason)
}

// The messages of the log lines that record a supervisor's lease terms,
// with the attributes lease_term, actor and at (RFC 3339, the supervisor's
// clock), and reason for an end.
const (
	LogLeaseTermBegan = "supervisor lease term began"
	LogLeaseTermEnded = "supervisor lease term ended"
)
