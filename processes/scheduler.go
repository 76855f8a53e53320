package processes

import (
	"container/heap"
	"context"
	"encoding/json"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/internal/tracing"
	"github.com/sagaengine/saga/processes/port"
)

// Scheduler is the process manager that drives tasks through their steps.
//
// It follows every task stream, keeping in memory only unfinished tasks.
// With Checkpoints it resumes from the newest task checkpoint: it reads the
// streams of the tasks unfinished there and follows the store after it, so
// start-up does not grow with finished history; without one it follows the
// store from the start. While it catches up it only folds events; once
// caught up it decides for every unfinished task and re-sends the commands
// of attempts still in flight (agents are idempotent), so a restart
// finishes what was started. Live, it decides after every event and every
// agent reply.
//
// Every instance folds every unfinished task, its own or not, so that one
// that takes over partitions from another already knows their tasks. It
// saves a checkpoint every CheckpointEvery while events arrive, from its
// own folded state (see snapshot).
//
// Each task belongs to one of a fixed set of shards, a goroutine that alone
// owns the task's state, so decisions for one task never race while
// different tasks progress concurrently. Every append carries the revision
// the decision was made on: if another writer got there first, the shard
// re-reads the stream and decides again. A command is produced only after
// the StepDispatched that records it is stored.
type Scheduler struct {
	Store       EventStore
	Commands    CommandSender
	DeadLetters DeadLetters
	Workflows   Workflows
	// Actor names this instance; it is the LockedBy of its dispatches.
	Actor  string
	Clock  Clock
	Logger *slog.Logger
	// Shards is how many tasks may be decided at once. Default
	// DefaultShards.
	Shards int
	// Ownership says which tasks this instance decides when several
	// schedulers share the work; nil means all of them. Call Rebalanced
	// when it changes.
	Ownership Ownership
	// Checkpoints, when set, keep the scheduler's task checkpoints, shared
	// by every scheduler instance under CheckpointName; nil means follow
	// the store from the start at every start.
	Checkpoints TaskCheckpoints
	// CheckpointName names the checkpoint. Default
	// DefaultSchedulerCheckpoint.
	CheckpointName string
	// CheckpointEvery bounds the time between checkpoints while events
	// arrive. Default DefaultTaskCheckpointEvery.
	CheckpointEvery time.Duration
	// Observer, when set, hears of the replies recorded and the tasks
	// finished.
	Observer Observer
	// Tracing starts the spans of replies, dispatches and compensations;
	// nil means the global TracerProvider.
	Tracing trace.TracerProvider
	// Agents, when set, knows the agent instances from their heartbeats:
	// the scheduler then puts no more steps in flight for an agent than
	// its healthy instances take (StepWaiting records a step that waits,
	// and waiting steps go in priority order as room frees), and sends
	// each command to a chosen healthy instance. An agent that sends no
	// heartbeats gets its commands by task id, with no limit. Nil means
	// no agent is known.
	Agents AgentDirectory
	// Router, when set, maps the instance a dispatch names to where its
	// command goes (a partition the instance consumes); nil, or an
	// instance it cannot map, sends the command by task id.
	Router CommandRouter
	// AgentsReady, when set, is closed once Agents has read the heartbeats
	// there were when it started. The scheduler goes live only after it:
	// deciding earlier would see no instance of any agent and dispatch
	// every due step at once, unlimited, as a restart under load would.
	AgentsReady <-chan struct{}
	// PreferInstance, when set with Agents, names the agent instances a
	// dispatch goes to first when they have room (dispatch.View.Prefer):
	// those of this process, to which a command costs no Kafka hop.
	PreferInstance func(instance string) bool
	// PriorityAging is how long a waiting dispatch waits before it ranks
	// as the next higher priority (domain.AgedRank); default
	// domain.DefaultPriorityAging.
	PriorityAging time.Duration
	// AwaitInbox, when set, meets the tasks that begin to wait for an
	// application event (await steps) with the events that came before
	// (see Awaiter); nil leaves such steps to the events that come after.
	AwaitInbox *AwaitInbox

	// runCtx is Run's context, for the work a shard hands off.
	runCtx   context.Context
	init     sync.Once
	capacity *capacity
	tracer   trace.Tracer
	repo     *TaskRepository
	shards   []*shard
	ready    chan struct{}
	// liveShards counts the shards that have caught up.
	liveShards atomic.Int64

	dispatched, staleReplies, rejectedReplies, conflicts atomic.Int64
	startLoads, startEvents, checkpoints, started        atomic.Int64
}

// SchedulerStats counts what the scheduler did.
type SchedulerStats struct {
	Dispatched      int64
	StaleReplies    int64
	RejectedReplies int64
	Conflicts       int64
	// StartLoads counts the task streams read at start, those of the
	// tasks unfinished at the checkpoint.
	StartLoads int64
	// StartEvents counts the events delivered before the scheduler caught
	// up: those after the checkpoint, or every one without a checkpoint.
	StartEvents int64
	// Checkpoints counts the task checkpoints saved.
	Checkpoints int64
	// Started counts the tasks recorded with their first decisions
	// (Start).
	Started int64
}

// Stats returns the scheduler's counters.
func (s *Scheduler) Stats() SchedulerStats {
	return SchedulerStats{Dispatched: s.dispatched.Load(), StaleReplies: s.staleReplies.Load(), RejectedReplies: s.rejectedReplies.Load(),
		Conflicts: s.conflicts.Load(), StartLoads: s.startLoads.Load(), StartEvents: s.startEvents.Load(), Checkpoints: s.checkpoints.Load(),
		Started: s.started.Load()}
}

// maxDone bounds how many finished tasks a shard remembers to skip their
// last events cheaply: those it appended itself, which the subscription
// delivers shortly after. Past it, it forgets the oldest and would re-read
// its stream should an event of it still come. With DefaultShards, a
// scheduler finishing 2,000 tasks a second remembers the last half
// minute's.
const maxDone = 256

// inboxSize is the room of a shard's queue of events and replies; with
// DefaultShards, 16,384 in all.
const inboxSize = 64

// doneOrder is the order in which a shard's finished tasks were
// remembered, oldest first, as a ring of maxDone ids.
type doneOrder struct {
	ids  [maxDone]string
	next int
}

type shard struct {
	s     *Scheduler
	inbox chan job
	tasks map[string]*domain.Task
	// done remembers the final revision of tasks that reached a terminal
	// state, which are no longer kept in tasks.
	done      map[string]int64
	doneOrder *doneOrder
	// unread holds the tasks whose stream could not be read: their state
	// is unknown, so checkpoints name them until a read succeeds.
	unread map[string]struct{}
	live   bool
	// wakes holds the times at which retries of tasks fall due.
	wakes dueHeap[wakeEntry]
	// timer fires when the earliest wake falls due; nil until one is
	// scheduled.
	timer Timer
	// roomFreedSignal signals that the tasks in roomWoken may have room
	// at their agent now (wakeForRoom).
	roomFreedSignal chan struct{}
	roomWokenMu     sync.Mutex
	roomWoken       map[string]struct{}
	// marks are the marks of waiting await steps known to be in their
	// inboxes, by task (awaitMark).
	marks map[string][]awaitMark

	// held are the sizes of the maps above as of the shard's last turn,
	// for Held: the maps are the shard goroutine's alone.
	held struct{ tasks, finished, wakes, unread, marks atomic.Int64 }
}

// job is work handed to a shard's goroutine, the only one that touches
// the shard's tasks: each kind of work is a type of its own.
type job interface {
	// do carries the work out on the shard's goroutine.
	do(ctx context.Context, sh *shard)
}

// caughtUpJob says the subscription has delivered every stored event: the
// shard goes live.
type caughtUpJob struct{}

func (caughtUpJob) do(ctx context.Context, sh *shard) { sh.goLive(ctx) }

// rebalancedJob says the tasks this instance owns changed: a live shard
// resumes every task it now owns.
type rebalancedJob struct{}

func (rebalancedJob) do(ctx context.Context, sh *shard) {
	if sh.live {
		sh.resumeAll(ctx)
	}
}

// eventJob is an event of a task stream, as the subscription delivers
// it.
type eventJob struct{ event *domain.RecordedEvent }

func (j eventJob) do(ctx context.Context, sh *shard) { sh.onEvent(ctx, j.event) }

// replyJob is an agent's reply to record; done gets the outcome.
type replyJob struct {
	reply protocol.StepReply
	// span is the reply's handling (SpanReply), ended once done answers.
	span   trace.Span
	source string
	done   chan<- error
}

func (j replyJob) do(ctx context.Context, sh *shard) {
	j.done <- sh.onReply(trace.ContextWithSpan(ctx, j.span), j.reply, j.source)
}

// startJob is a submission to record with its first decisions (Start);
// done gets the outcome.
type startJob struct {
	// ctx is the submitter's: its span is the parent of the dispatch, and
	// the append ends with it.
	ctx  context.Context
	sub  submission
	done chan<- error
}

func (j startJob) do(_ context.Context, sh *shard) { j.done <- sh.start(j.ctx, &j.sub) }

// snapshotJob asks for the ids of the shard's unfinished tasks, for a
// checkpoint: those it holds and those it could not read.
type snapshotJob struct{ answer chan<- []string }

func (j snapshotJob) do(_ context.Context, sh *shard) {
	ids := make([]string, 0, len(sh.tasks)+len(sh.unread))
	for id := range sh.tasks {
		ids = append(ids, id)
	}
	for id := range sh.unread {
		ids = append(ids, id)
	}
	j.answer <- ids
}

// submission is a new task handed to Start.
type submission struct {
	id     string
	meta   domain.EventMetadata
	events []domain.Event
}

func (s *Scheduler) setup() {
	s.init.Do(func() {
		n := s.Shards
		if n <= 0 {
			n = DefaultShards
		}
		s.ready = make(chan struct{})
		s.tracer = tracing.Tracer(s.Tracing)
		for i := 0; i < n; i++ {
			s.shards = append(s.shards, &shard{s: s, inbox: make(chan job, inboxSize), tasks: map[string]*domain.Task{}, done: map[string]int64{}, doneOrder: &doneOrder{},
				unread: map[string]struct{}{}, roomFreedSignal: make(chan struct{}, 1), roomWoken: map[string]struct{}{},
				marks: map[string][]awaitMark{}})
		}
		s.capacity = newCapacity(s.Agents, s.Clock, s.PriorityAging)
		s.capacity.prefer = s.PreferInstance
	})
}

// Ready is closed once the scheduler has caught up with the store.
func (s *Scheduler) Ready() <-chan struct{} {
	s.setup()
	return s.ready
}

// Run follows the store and decides until ctx ends. It refuses to start
// with an invalid configuration (Validate).
func (s *Scheduler) Run(ctx context.Context) error {
	if err := s.Validate(); err != nil {
		return err
	}
	s.setup()
	s.repo = NewTaskRepository(s.Store)
	s.repo.Observer = s.Observer
	if s.CheckpointName == "" {
		s.CheckpointName = DefaultSchedulerCheckpoint
	}
	if s.CheckpointEvery <= 0 {
		s.CheckpointEvery = DefaultTaskCheckpointEvery
	}
	from := domain.FromStart()
	if s.Checkpoints != nil {
		if cp, ok := resumePoint(ctx, s.Checkpoints, s.CheckpointName, s.Logger); ok {
			s.resumeFrom(ctx, cp)
			from = domain.AfterPosition(cp.Position)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	s.runCtx = ctx
	var wg sync.WaitGroup
	for _, sh := range s.shards {
		wg.Add(1)
		go func(sh *shard) {
			defer wg.Done()
			sh.run(ctx)
		}(sh)
	}
	defer wg.Wait()
	cps := s.checkpointer()
	wg.Add(1)
	go func() {
		defer wg.Done()
		cps.ticking(ctx)
	}()
	if s.Agents != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.watchRoom(ctx)
		}()
	}
	caughtUp := false
	err := s.Store.SubscribeAll(ctx, from, domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
		if it.CaughtUp {
			if s.AgentsReady != nil {
				select {
				case <-s.AgentsReady:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			for _, sh := range s.shards {
				if err := s.enqueue(ctx, sh, caughtUpJob{}); err != nil {
					return err
				}
			}
			caughtUp = true
			return cps.caughtUp(ctx)
		}
		if !caughtUp {
			s.startEvents.Add(1)
		}
		id, ok := domain.TaskIDFromStream(it.Event.Stream)
		if !ok {
			return nil
		}
		if err := s.enqueue(ctx, s.shardOf(id), eventJob{event: it.Event}); err != nil {
			return err
		}
		return cps.handled(ctx, it.Event.Position)
	})
	if ctx.Err() != nil {
		return nil
	}
	return errors.Wrap(err, "scheduler subscription")
}

// resumeFrom loads the tasks a checkpoint names into their shards, before
// the shards run.
func (s *Scheduler) resumeFrom(ctx context.Context, cp domain.TaskCheckpoint) {
	began := time.Now()
	tasks, unread := loadTasks(ctx, s.repo, cp.Tasks, s.Logger)
	s.startLoads.Add(int64(len(cp.Tasks)))
	for _, t := range tasks {
		if sh := s.shardOf(t.ID); sh.putTask(t) {
			sh.schedule(t)
		}
	}
	for _, id := range unread {
		s.shardOf(id).unread[id] = struct{}{}
	}
	s.Logger.Info("scheduler resumes from its checkpoint", "position", cp.Position, "tasks", len(cp.Tasks),
		"unfinished", len(tasks), "took", time.Since(began).Round(time.Millisecond))
}

// checkpointer returns what saves the scheduler's checkpoints; without
// Checkpoints it saves none.
func (s *Scheduler) checkpointer() *checkpointer {
	if s.Checkpoints == nil {
		return &checkpointer{}
	}
	return &checkpointer{every: s.CheckpointEvery, lastSave: time.Now(), snapshot: s.snapshot}
}

// snapshot collects the unfinished tasks of every shard as of the last
// event enqueued, and saves them with position. Each shard answers after
// the events queued before the request, so its answer covers every event
// up to position. A shard may already have applied its own appends past
// position (a task it just finished is missing then): such a task has an
// event after position, which brings it back on demand. So the checkpoint
// names every task that was unfinished at position and has nothing after
// it, as a resume needs.
func (s *Scheduler) snapshot(ctx context.Context, position uint64) (func(), error) {
	answers := make(chan []string, len(s.shards))
	for _, sh := range s.shards {
		if err := s.enqueue(ctx, sh, snapshotJob{answer: answers}); err != nil {
			return nil, err
		}
	}
	return func() {
		cp := domain.TaskCheckpoint{Position: position}
		for range s.shards {
			select {
			case ids := <-answers:
				cp.Tasks = append(cp.Tasks, ids...)
			case <-ctx.Done():
				return
			}
		}
		if saveTaskCheckpoint(ctx, s.Checkpoints, s.CheckpointName, cp, s.Logger) {
			s.checkpoints.Add(1)
		}
	}, nil
}

func (s *Scheduler) enqueue(ctx context.Context, sh *shard, j job) error {
	select {
	case sh.inbox <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Scheduler) shardOf(taskID string) *shard {
	h := fnv.New32a()
	h.Write([]byte(taskID))
	return s.shards[h.Sum32()%uint32(len(s.shards))]
}

// Rebalanced tells the scheduler that the tasks it owns changed: it resumes
// every unfinished task it now owns (re-sending attempts in flight, which the
// previous owner may not have sent).
func (s *Scheduler) Rebalanced(ctx context.Context) {
	s.setup()
	for _, sh := range s.shards {
		if err := s.enqueue(ctx, sh, rebalancedJob{}); err != nil {
			return
		}
	}
}

func (s *Scheduler) owns(taskID string) bool { return s.Ownership == nil || s.Ownership.Owns(taskID) }

// roomCheckEvery is how often the scheduler looks whether heartbeats
// brought room for waiting dispatches (an instance joined or recovered).
const roomCheckEvery = 250 * time.Millisecond

// watchRoom wakes waiting dispatches when agents' heartbeats bring room.
func (s *Scheduler) watchRoom(ctx context.Context) {
	timer := s.Clock.NewTimer(roomCheckEvery)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
			s.capacity.wakeAll()
			timer.Reset(roomCheckEvery)
		}
	}
}

// Held is what the scheduler holds in memory, by structure: unfinished
// tasks, finished ones remembered (at most maxDone a shard), retry wakes,
// unreadable tasks, tasks whose waiting await steps have their marks known
// to be in their inboxes ("awaits"), and the attempts in flight (stored,
// or held while appended), waiting for room and avoided instances that
// dispatch tracks.
func (s *Scheduler) Held() Held {
	s.setup()
	h := Held{"tasks": 0, "finished": 0, "wakes": 0, "unsure": 0, "awaits": 0}
	for _, sh := range s.shards {
		h["tasks"] += int(sh.held.tasks.Load())
		h["finished"] += int(sh.held.finished.Load())
		h["wakes"] += int(sh.held.wakes.Load())
		h["unsure"] += int(sh.held.unread.Load())
		h["awaits"] += int(sh.held.marks.Load())
	}
	s.capacity.mu.Lock()
	h["inflight"] = len(s.capacity.inflight)
	for id := range s.capacity.held {
		if _, ok := s.capacity.inflight[id]; !ok {
			h["inflight"]++
		}
	}
	h["avoided"] = len(s.capacity.avoid)
	h["waiting"] = 0
	for _, ws := range s.capacity.waiting {
		h["waiting"] += ws.len()
	}
	s.capacity.mu.Unlock()
	return h
}

// Unfinished counts the unfinished tasks the scheduler holds, as Held's
// "tasks" does, without its cost: the intake gate asks for it often.
func (s *Scheduler) Unfinished() int {
	s.setup()
	n := 0
	for _, sh := range s.shards {
		n += int(sh.held.tasks.Load())
	}
	return n
}

// Waiting counts the dispatches that wait for room, by agent.
func (s *Scheduler) Waiting() map[string]int {
	out := map[string]int{}
	for agent, byPriority := range s.WaitingByPriority() {
		for _, n := range byPriority {
			out[agent] += n
		}
	}
	return out
}

// WaitingByPriority counts the dispatches of this scheduler's tasks that
// wait for room, by agent and priority.
func (s *Scheduler) WaitingByPriority() map[string]map[domain.Priority]int {
	s.setup()
	return s.capacity.waitingCount()
}

// HandleReply records an agent's reply. Replies for attempts no longer in
// flight are counted and ignored; replies that name no task or step of the
// task are dead-lettered. It returns an error only when the reply could not
// be processed and should be retried. Its span (SpanReply) is a child of
// the agent's, and the parent of what the reply leads to.
func (s *Scheduler) HandleReply(ctx context.Context, msg Inbound) (err error) {
	s.setup()
	ctx, span := tracing.ConsumerSpan(ctx, s.tracer, SpanReply, msg)
	defer func() { tracing.EndSpan(span, err) }()
	reply, err := protocol.ParseStepReply(msg.Value)
	if err != nil {
		return s.rejectReply(ctx, msg, err)
	}
	return s.record(ctx, reply, msg)
}

// RecordReply records a reply handed over inside the process by an agent
// instance that ran the command there (Agent.Execute): as HandleReply,
// without the encoding. It is the ReplySender of such commands.
func (s *Scheduler) RecordReply(ctx context.Context, reply protocol.StepReply) (err error) {
	s.setup()
	msg := port.InProcessMessage(protocol.RepliesTopic, reply.TaskID, reply.TraceParent)
	ctx, span := tracing.ConsumerSpan(ctx, s.tracer, SpanReply, msg)
	defer func() { tracing.EndSpan(span, err) }()
	return s.record(ctx, reply, msg)
}

// record hands a decoded reply to its task's shard and waits for the
// outcome; msg is what is dead-lettered when the reply can never be
// recorded.
func (s *Scheduler) record(ctx context.Context, reply protocol.StepReply, msg Inbound) error {
	span := trace.SpanFromContext(ctx)
	tracing.SetAttributes(span, func() []attribute.KeyValue {
		return []attribute.KeyValue{AttrTaskID.String(reply.TaskID), AttrStep.String(reply.Step), AttrAction.String(reply.Action),
			AttrAttempt.Int(reply.Attempt), AttrAgent.String(reply.Agent), AttrOutcome.String(reply.Outcome)}
	})
	done := make(chan error, 1)
	if err := s.enqueue(ctx, s.shardOf(reply.TaskID), replyJob{reply: reply, span: span, source: msg.Source(), done: done}); err != nil {
		return err
	}
	select {
	case err := <-done:
		if errors.Is(err, domain.ErrTaskNotFound) || errors.Is(err, domain.ErrUnknownStep) {
			if msg.Value == nil {
				msg.Value, _ = json.Marshal(reply)
			}
			return s.rejectReply(ctx, msg, err)
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrNotStarted is returned by Scheduler.Start when this scheduler does not
// take the submission: it is not live yet, another instance owns the task,
// or it knows the task already. The caller then records the submission
// alone, and the scheduler that owns the task decides for it as it follows
// the store.
var ErrNotStarted = errors.New("the scheduler did not start the task")

// Start records a new task together with the scheduler's first decisions
// for it (its first dispatch) in the one append that creates the task's
// stream, then sends the commands: a submitter in the scheduler's process
// saves the append, and the hop through the store, that would otherwise
// follow the submission (TaskStarter). The submission's events keep meta,
// the submitter's; the decisions are the scheduler's, as always. It returns
// domain.ErrTaskExists when the stream exists (a duplicate order), and
// ErrNotStarted when the caller must record the submission itself: also
// when the store refused the append (domain.ErrAppendRefused, too large
// say), which the submission alone may not be.
func (s *Scheduler) Start(ctx context.Context, id string, meta domain.EventMetadata, submitted ...domain.Event) error {
	s.setup()
	done := make(chan error, 1)
	if err := s.enqueue(ctx, s.shardOf(id), startJob{ctx: ctx, sub: submission{id: id, meta: meta, events: submitted}, done: done}); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// rejectReply dead-letters a reply that can never be recorded.
func (s *Scheduler) rejectReply(ctx context.Context, msg Inbound, reason error) error {
	s.rejectedReplies.Add(1)
	tracing.FailSpan(trace.SpanFromContext(ctx), reason)
	s.Logger.Warn("reply rejected to dead letters", "source", msg.Source(), "reason", reason.Error())
	return errors.Wrap(s.DeadLetters.DeadLetter(ctx, msg, reason.Error()), "dead-letter reply")
}

func (sh *shard) run(ctx context.Context) {
	for {
		sh.held.tasks.Store(int64(len(sh.tasks)))
		sh.held.finished.Store(int64(len(sh.done)))
		sh.held.wakes.Store(int64(len(sh.wakes)))
		sh.held.unread.Store(int64(len(sh.unread)))
		sh.held.marks.Store(int64(len(sh.marks)))
		select {
		case <-ctx.Done():
			return
		case <-sh.timerC():
			sh.wake(ctx)
		case <-sh.roomFreedSignal:
			sh.roomFreed(ctx)
		case j := <-sh.inbox:
			j.do(ctx, sh)
		}
	}
}

// decision is what a decision for task t needs: dispatches are admitted
// by the agents' room, read only (capacity.check); rc remembers where the
// last admission found no room, for noteWait once the decision is done.
func (sh *shard) decision(t *domain.Task, rc *roomCheck) domain.Decision {
	d := domain.Decision{Now: sh.s.Clock.Now(), Actor: sh.s.Actor, Random: rand.Float64()}
	if sh.s.Agents != nil && rc != nil {
		rc.refused = nil
		d.Admit = func(agent string, own []domain.InFlightAttempt) domain.Admission {
			a, refused := sh.s.capacity.check(agent, t, own)
			rc.refused = refused
			return a
		}
	}
	return d
}

// roomCheck carries, out of a decision, where its last admission found no
// room: the decision itself changes nothing, so that it may run again
// after a conflict with nothing to undo.
type roomCheck struct{ refused *refusal }

// maxHoldTries bounds how often one decision is made again because the
// room it was admitted to was taken meanwhile (decide); past it, the
// dispatch goes unheld and the agent instance's own limit holds.
const maxHoldTries = 16

// decide makes a decision for task t with decide, which reads the agents'
// room only, and holds the room its dispatch was admitted to until the
// dispatch is stored (capacity.hold). Two shards may read the same free
// room at once: the one whose hold comes second decides again, as after a
// conflict in the store.
func (sh *shard) decide(t *domain.Task, rc *roomCheck, decide func(domain.Decision) ([]domain.Event, error)) ([]domain.Event, error) {
	for try := 1; ; try++ {
		events, err := decide(sh.decision(t, rc))
		if err != nil || !sh.s.capacity.enabled() {
			return events, err
		}
		if d, own := dispatchOf(t, events); sh.s.capacity.hold(t, d, own) || try == maxHoldTries {
			return events, err
		}
	}
}

// dispatchOf is where the last dispatch among events for task t goes, and
// the other attempts t has in flight once they are stored; nil when they
// dispatch nothing.
func dispatchOf(t *domain.Task, events []domain.Event) (*route, []domain.InFlightAttempt) {
	var r *route
	last := -1
	for i, e := range events {
		switch d := e.(type) {
		case domain.StepDispatched:
			r, last = &route{agent: d.Agent, instance: d.Instance}, i
		case domain.CompensationDispatched:
			r, last = &route{agent: d.Agent, instance: d.Instance}, i
		}
	}
	if r == nil {
		return nil, nil
	}
	after := t.Clone()
	for _, e := range events[:last] {
		after.Apply(e)
	}
	return r, after.InFlight()
}

// decided follows a decision for task id once it is stored or failed: the
// room held for its dispatch is released (a stored dispatch counts as in
// flight by then) and, when waits is set, the task waits where the
// decision's last admission found no room; wakeForRoom wakes it.
func (sh *shard) decided(id string, rc *roomCheck, waits bool) {
	sh.s.capacity.release(id)
	if r := rc.refused; r != nil && waits && sh.waitsForRoom(id) {
		sh.s.capacity.wait(r, func() { sh.wakeForRoom(r.task) })
	}
}

// waitsForRoom reports whether the shard holds task id and its state says
// a step or compensation of it waits for room. A refusal may outlive the
// decision it came from (a decision made again after a conflict found the
// task finished, and decided nothing), and a wait noted for a task that
// does not wait would never be dropped: the 100,000-order flood left
// 53,374 of them.
func (sh *shard) waitsForRoom(id string) bool {
	t := sh.tasks[id]
	if t == nil || t.State.Terminal() {
		return false
	}
	for _, s := range t.Steps {
		if s.Waiting() || s.Compensation.Waiting() {
			return true
		}
	}
	return false
}

// wakeForRoom asks the shard to decide again for a task that waits for
// room; it never blocks, so any goroutine may call it.
func (sh *shard) wakeForRoom(id string) {
	sh.roomWokenMu.Lock()
	sh.roomWoken[id] = struct{}{}
	sh.roomWokenMu.Unlock()
	select {
	case sh.roomFreedSignal <- struct{}{}:
	default:
	}
}

// roomFreed decides again for the tasks woken for room, higher priorities
// first.
func (sh *shard) roomFreed(ctx context.Context) {
	sh.roomWokenMu.Lock()
	ids := make([]string, 0, len(sh.roomWoken))
	for id := range sh.roomWoken {
		ids = append(ids, id)
	}
	clear(sh.roomWoken)
	sh.roomWokenMu.Unlock()
	var due []*domain.Task
	for _, id := range ids {
		switch t := sh.tasks[id]; {
		case t != nil && sh.live && sh.s.owns(id):
			due = append(due, t)
		case t == nil || !sh.s.owns(id):
			sh.s.capacity.forgetWaits(id)
		}
	}
	slices.SortStableFunc(due, func(a, b *domain.Task) int { return a.Priority.Rank() - b.Priority.Rank() })
	for _, t := range due {
		sh.advance(tracing.WithTraceParent(ctx, t.TraceParent), t, "room-freed")
	}
}

// goLive happens once the shard has seen every stored event: it decides
// for every unfinished task and re-sends the commands still in flight.
func (sh *shard) goLive(ctx context.Context) {
	if sh.live {
		return
	}
	sh.live = true
	sh.resumeAll(ctx)
	if sh.s.liveShards.Add(1) == int64(len(sh.s.shards)) {
		close(sh.s.ready)
	}
}

// resumeAll resends the attempts in flight of every task this instance
// owns and decides for each.
func (sh *shard) resumeAll(ctx context.Context) {
	for _, t := range sh.tasks {
		if !sh.s.owns(t.ID) {
			continue
		}
		ctx := tracing.WithTraceParent(ctx, t.TraceParent)
		sh.resend(ctx, t)
		sh.resumeAwaits(t)
		sh.advance(ctx, t, "resume")
	}
}

// resend produces again the command of every attempt in flight whose
// CompleteBy has not passed (later ones are the supervisor's).
func (sh *shard) resend(ctx context.Context, t *domain.Task) {
	now := sh.s.Clock.Now()
	for _, a := range t.InFlight() {
		if a.CompleteBy.After(now) {
			sh.send(ctx, t, a)
		}
	}
}

// wake decides for the tasks whose retries fell due, higher priorities
// first when several are due at once (then in the order they fell due).
func (sh *shard) wake(ctx context.Context) {
	now := sh.s.Clock.Now()
	var due []*domain.Task
	for len(sh.wakes) > 0 && !sh.wakes[0].at.After(now) {
		w := heap.Pop(&sh.wakes).(wakeEntry)
		if t := sh.tasks[w.taskID]; t != nil && sh.live && sh.s.owns(t.ID) {
			due = append(due, t)
		}
	}
	slices.SortStableFunc(due, func(a, b *domain.Task) int { return a.Priority.Rank() - b.Priority.Rank() })
	for _, t := range due {
		sh.advance(tracing.WithTraceParent(ctx, t.TraceParent), t, "retry-due")
	}
	sh.armTimer()
}

// schedule remembers when the task's next retry falls due.
func (sh *shard) schedule(t *domain.Task) {
	if at, ok := t.NextWake(); ok {
		heap.Push(&sh.wakes, wakeEntry{at: at, taskID: t.ID})
		sh.armTimer()
	}
}

func (sh *shard) armTimer() {
	if sh.timer != nil {
		sh.timer.Stop()
	}
	if len(sh.wakes) == 0 {
		return
	}
	d := max(sh.wakes[0].at.Sub(sh.s.Clock.Now()), 0)
	if sh.timer == nil {
		sh.timer = sh.s.Clock.NewTimer(d)
	} else {
		sh.timer.Reset(d)
	}
}

// timerC is the channel of the shard's timer; nil (never ready) before one
// is armed.
func (sh *shard) timerC() <-chan time.Time {
	if sh.timer == nil {
		return nil
	}
	return sh.timer.C()
}

// wakeEntry is a retry falling due. One whose task has moved on is
// harmless: waking it decides nothing new.
type wakeEntry struct {
	at     time.Time
	taskID string
}

func (w wakeEntry) dueAt() time.Time { return w.at }

func (sh *shard) onEvent(ctx context.Context, e *domain.RecordedEvent) {
	id, _ := domain.TaskIDFromStream(e.Stream)
	if rev, ok := sh.done[id]; ok && int64(e.Revision) <= rev {
		return
	}
	t := sh.tasks[id]
	if t == nil {
		t = domain.NewTask(id)
	}
	ev, err := t.ApplyRecorded(e)
	switch {
	case errors.Is(err, domain.ErrRevisionGap):
		// Events of the task came before this shard knew it (it started
		// before the checkpoint, or finished and came back): read them.
		if t, err = sh.load(ctx, id); err != nil {
			return
		}
	case err != nil:
		sh.unreadable(id, err)
		return
	case ev == nil:
		return // this shard appended it and applied it already
	}
	if !sh.putTask(t) {
		return
	}
	sh.schedule(t)
	if !sh.live || !sh.s.owns(id) {
		return
	}
	// What another writer appended (a submission, a timeout, an
	// operator's action) is the parent of what it leads to.
	parent := e.Metadata.TraceParent
	if !ValidTraceParent(parent) {
		parent = t.TraceParent
	}
	ctx = tracing.WithTraceParent(ctx, parent)
	switch ev.(type) {
	case domain.CompensationRequested, domain.TaskCancelled:
		var span trace.Span
		ctx, span = sh.compensateSpan(ctx, t)
		defer span.End()
	}
	sh.advance(ctx, t, e.ID)
}

// compensateSpan starts the span of starting to undo task t (SpanCompensate).
func (sh *shard) compensateSpan(ctx context.Context, t *domain.Task) (context.Context, trace.Span) {
	return sh.s.tracer.Start(ctx, SpanCompensate, trace.WithAttributes(AttrTaskID.String(t.ID), AttrWorkflow.String(t.Workflow), AttrReason.String(t.Reason)))
}

// putTask stores t in the shard, or forgets it (rememberFinished) once it
// is terminal; it reports whether the task still needs decisions.
func (sh *shard) putTask(t *domain.Task) bool {
	sh.s.capacity.track(t)
	sh.keepMarks(t)
	if t.State.Terminal() {
		delete(sh.tasks, t.ID)
		sh.rememberFinished(t)
		return false
	}
	sh.tasks[t.ID] = t
	return true
}

// rememberFinished notes the final revision of a task that reached a
// terminal state, forgetting the oldest one past maxDone.
func (sh *shard) rememberFinished(t *domain.Task) {
	if _, ok := sh.done[t.ID]; !ok {
		ring := sh.doneOrder
		if old := ring.ids[ring.next]; old != "" {
			delete(sh.done, old)
		}
		ring.ids[ring.next], ring.next = t.ID, (ring.next+1)%maxDone
	}
	sh.done[t.ID] = t.Revision
}

// load reads a task's whole stream and folds it. A task whose stream
// cannot be read or folded is remembered as unread, so that checkpoints
// keep naming it until a read succeeds, and nothing is decided for it.
func (sh *shard) load(ctx context.Context, id string) (*domain.Task, error) {
	t, err := sh.s.repo.Load(ctx, id)
	if err != nil {
		sh.unreadable(id, err)
		return nil, err
	}
	sh.putReadTask(t)
	return t, nil
}

// unreadable notes a task whose stream could not be read or folded: it is
// unread until a read succeeds. A task with an event this version cannot
// read is forgotten, so nothing is decided for it; after a failed read the
// state it had is kept, so that a retry falling due tries again.
func (sh *shard) unreadable(id string, err error) {
	sh.s.Logger.Error("task cannot be read", "task_id", id, "err", err.Error())
	if errors.Is(err, domain.ErrUnreadableEvent) {
		delete(sh.tasks, id)
		delete(sh.marks, id)
	}
	sh.unread[id] = struct{}{}
}

// putReadTask stores a task just read from its stream: it is no longer
// unread, nor finished unless it says so.
func (sh *shard) putReadTask(t *domain.Task) {
	delete(sh.unread, t.ID)
	delete(sh.done, t.ID)
	if !t.Exists() {
		// Never submitted (a reply naming an unknown task, say): no state
		// is kept for it, so nothing can later decide for it.
		delete(sh.tasks, t.ID)
		delete(sh.marks, t.ID)
		return
	}
	if sh.putTask(t) {
		sh.schedule(t)
	}
}

// advance decides what the task needs next and records it.
func (sh *shard) advance(ctx context.Context, t *domain.Task, causation string) {
	var rc roomCheck
	defer sh.decided(t.ID, &rc, true)
	_ = sh.update(ctx, t.ID, t, causation, func(t *domain.Task) ([]domain.Event, error) {
		if t.State.Terminal() {
			return nil, nil
		}
		wf, err := sh.s.Workflows.Workflow(ctx, t.Workflow, t.WorkflowVersion)
		switch {
		case errors.Is(err, domain.ErrUnknownWorkflow):
			return []domain.Event{domain.TaskFailed{TaskID: t.ID, Reason: err.Error(), At: sh.s.Clock.Now()}}, nil
		case err != nil:
			return nil, errors.Wrap(err, "read the workflow of a task")
		}
		return sh.decide(t, &rc, func(d domain.Decision) ([]domain.Event, error) { return t.Next(wf, d), nil })
	})
}

func (sh *shard) onReply(ctx context.Context, r protocol.StepReply, source string) error {
	compensation := r.Action == protocol.ActionCompensate
	if r.Outcome == protocol.OutcomeUnavailable && r.Target == "" {
		// An instance that refused one target alone takes other work.
		sh.s.capacity.returned(r.Instance)
	}
	var agent string
	var dispatchedAt time.Time
	var rc roomCheck
	defer sh.decided(r.TaskID, &rc, true)
	err := sh.update(ctx, r.TaskID, sh.tasks[r.TaskID], source, func(t *domain.Task) ([]domain.Event, error) {
		wf, err := sh.s.Workflows.Workflow(ctx, t.Workflow, t.WorkflowVersion)
		if err != nil {
			return nil, errors.Wrapf(err, "task %s", t.ID)
		}
		if l := legOf(t, r.Step, compensation); l != nil && l.Attempt == r.Attempt {
			agent, dispatchedAt = t.Step(r.Step).Agent, l.DispatchedAt
		}
		return sh.decide(t, &rc, func(d domain.Decision) ([]domain.Event, error) {
			if s := t.Step(r.Step); r.Outcome == protocol.OutcomeUnavailable && s != nil && (r.Target != "" || !sh.s.capacity.usable(s.Agent, d.Now)) {
				d.ReturnPause = DefaultReturnPause
			}
			return t.RecordReply(wf, r.Reply(), d)
		})
	})
	switch {
	case errors.Is(err, domain.ErrStaleReply):
		sh.s.staleReplies.Add(1)
		trace.SpanFromContext(ctx).SetAttributes(AttrOutcome.String("stale"))
		tracing.TaskLogger(ctx, sh.s.Logger, r.TaskID).Debug("stale reply ignored", "source", source, "reason", err.Error())
		return nil
	case err == nil && sh.s.Observer != nil && !dispatchedAt.IsZero():
		action := r.Action
		if action == "" {
			action = protocol.ActionExecute
		}
		sh.s.Observer.StepAnswered(agent, action, r.Outcome, sh.s.Clock.Now().Sub(dispatchedAt))
	}
	return err
}

// update decides through the task repository, starting from the shard's
// state of the task (known, nil when it has none), keeps what the
// repository read or appended, and then carries out the effects of the
// appended events: commands are produced only after the append that
// records them.
func (sh *shard) update(ctx context.Context, id string, known *domain.Task, causation string, decide domain.UpdateFunc) error {
	meta := domain.EventMetadata{CausationID: causation, Actor: sh.s.Actor, TraceParent: tracing.StoredTraceParent(ctx)}
	u, err := sh.s.repo.Update(ctx, id, known, meta, decide)
	sh.s.conflicts.Add(int64(u.Conflicts))
	switch {
	case u.Task == nil:
		if err != nil && ctx.Err() == nil {
			sh.unreadable(id, err)
		}
		return err
	case u.Read:
		sh.putReadTask(u.Task)
	}
	if err != nil {
		if !errors.Is(err, domain.ErrTaskNotFound) && !errors.Is(err, domain.ErrStaleReply) && !errors.Is(err, domain.ErrUnknownStep) && ctx.Err() == nil {
			tracing.TaskLogger(ctx, sh.s.Logger, id).Error("decide for a task", "err", err.Error())
		}
		return err
	}
	if len(u.Events) == 0 {
		return nil
	}
	sh.carryOut(ctx, u.Task, u.Events)
	return nil
}

// start records a submission with the first decisions for its task, when
// this shard may (see Scheduler.Start), and carries them out.
func (sh *shard) start(ctx context.Context, sub *submission) error {
	_, known := sh.tasks[sub.id]
	_, finished := sh.done[sub.id]
	if !sh.live || !sh.s.owns(sub.id) || known || finished {
		return ErrNotStarted
	}
	t := domain.NewTask(sub.id)
	for _, e := range sub.events {
		t.Apply(e)
	}
	wf, err := sh.s.Workflows.Workflow(ctx, t.Workflow, t.WorkflowVersion)
	if err != nil {
		return errors.Mark(err, ErrNotStarted)
	}
	var rc roomCheck
	decided, _ := sh.decide(t, &rc, func(d domain.Decision) ([]domain.Event, error) { return t.Next(wf, d), nil })
	meta := domain.EventMetadata{CausationID: sub.meta.CausationID, Actor: sh.s.Actor, TraceParent: tracing.StoredTraceParent(tracing.WithTraceParent(ctx, sub.meta.TraceParent))}
	if err := sh.s.repo.CreateDecided(ctx, sub.id, sub.meta, sub.events, meta, decided); err != nil {
		// Nothing is noted for the task but the room its dispatch held:
		// recorded or not, it is decided for again as the store
		// delivers it.
		sh.decided(sub.id, &rc, false)
		if errors.Is(err, domain.ErrAppendRefused) {
			return errors.Mark(err, ErrNotStarted) // the submission alone may fit
		}
		return err
	}
	for _, e := range decided {
		t.Apply(e)
	}
	taskFinished(sh.s.repo.Observer, t, false)
	sh.s.started.Add(1)
	sh.carryOut(ctx, t, decided)
	sh.decided(sub.id, &rc, true)
	return nil
}

// carryOut keeps a task after an append of events and carries out their
// effects: the commands of the dispatches they record.
func (sh *shard) carryOut(ctx context.Context, t *domain.Task, events []domain.Event) {
	for _, e := range events {
		if _, ok := e.(domain.CompensationRequested); ok {
			var span trace.Span
			ctx, span = sh.compensateSpan(ctx, t)
			defer span.End()
			break
		}
	}
	// The stored dispatches reserve their room (putTask, capacity.track)
	// before their commands go.
	kept := sh.putTask(t)
	for _, e := range events {
		switch d := e.(type) {
		case domain.StepDispatched:
			sh.send(ctx, t, domain.InFlightAttempt{Step: d.Step, Agent: d.Agent, Instance: d.Instance, Attempt: d.Attempt, CompleteBy: d.CompleteBy})
		case domain.CompensationDispatched:
			sh.send(ctx, t, domain.InFlightAttempt{Step: d.Step, Agent: d.Agent, Instance: d.Instance, Compensation: true, Attempt: d.Attempt,
				CompleteBy: d.CompleteBy})
		case domain.StepAwaiting:
			sh.startAwait(t, d)
		}
	}
	if kept {
		sh.schedule(t)
	}
}

func (sh *shard) send(ctx context.Context, t *domain.Task, a domain.InFlightAttempt) {
	cmd, err := commandFor(ctx, sh.s.Workflows, t, a)
	if err != nil {
		tracing.TaskLogger(ctx, sh.s.Logger, t.ID).Error("build command", "step", a.Step, "err", err.Error())
		return
	}
	ctx, span := sh.s.tracer.Start(ctx, SpanDispatch, trace.WithSpanKind(trace.SpanKindProducer))
	tracing.SetAttributes(span, func() []attribute.KeyValue {
		return []attribute.KeyValue{AttrTaskID.String(t.ID), AttrWorkflow.String(t.Workflow), AttrStep.String(cmd.Step), AttrAgent.String(cmd.Agent),
			AttrAction.String(cmd.Action), AttrAttempt.Int(cmd.Attempt),
			attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", protocol.CommandTopicFor(cmd.Agent, cmd.Priority))}
	})
	defer span.End()
	cmd.TraceParent = tracing.OutgoingTraceParent(ctx, t.TraceParent)
	if sh.s.Router != nil && a.Instance != "" {
		if route, ok := sh.s.Router.RouteCommand(cmd.Agent, a.Instance, protocol.CommandTopicFor(cmd.Agent, cmd.Priority), sh.s.Clock.Now()); ok {
			cmd.Route = route
			span.SetAttributes(AttrInstance.String(route.Instance))
		}
	}
	if err := sh.s.Commands.SendCommand(ctx, cmd); err != nil {
		// The dispatch is recorded; a restart re-sends it and the
		// supervisor retries it once CompleteBy passes.
		tracing.FailSpan(span, err)
		tracing.TaskLogger(ctx, sh.s.Logger, t.ID).Error("send command", "step", cmd.Step, "action", cmd.Action, "attempt", a.Attempt, "err", err.Error())
		return
	}
	sh.s.dispatched.Add(1)
}

// commandFor builds the command of an attempt in flight: the order, the
// results of the steps before (for a compensation, of every step, and the
// result of the step it undoes) and, for HTTP steps, the call to make.
func commandFor(ctx context.Context, workflows Workflows, t *domain.Task, a domain.InFlightAttempt) (protocol.ExecuteStep, error) {
	st := t.Step(a.Step)
	cmd := protocol.ExecuteStep{
		TaskID: t.ID, Workflow: t.Workflow, WorkflowVersion: t.WorkflowVersion, Step: st.Name, Agent: st.Agent,
		Action: protocol.ActionExecute, Attempt: a.Attempt, CompleteBy: a.CompleteBy, IdempotencyKey: st.IdempotencyKey,
		Order: t.Order, Priority: t.Priority,
	}
	if cmd.Priority == domain.PriorityNormal {
		cmd.Priority = "" // as before priorities: agents that know none see the same command
	}
	wf, err := workflows.Workflow(ctx, t.Workflow, t.WorkflowVersion)
	if err != nil {
		return cmd, err
	}
	def, ok := wf.Step(st.Name)
	if !ok {
		return cmd, errors.Wrapf(domain.ErrUnknownStep, "workflow %s version %d has no step %q", wf.Name, wf.Version, st.Name)
	}
	cmd.HTTP, cmd.Results = def.HTTP, t.ResultsFor(wf, st.Name)
	if a.Compensation {
		cmd.Action, cmd.IdempotencyKey = protocol.ActionCompensate, st.Compensation.IdempotencyKey
		cmd.Results, cmd.Result = t.Results(""), st.Result
		if def.Compensation != nil {
			cmd.Compensation, cmd.HTTP = def.Compensation.Action, def.Compensation.HTTP
		}
	}
	return cmd, nil
}
