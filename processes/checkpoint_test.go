package processes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// countingStore counts what a follower reads: the task streams, and the
// events each subscription delivers before it catches up.
type countingStore struct {
	*eventstore.Store
	mu    sync.Mutex
	reads map[string]int
	// beforeCaughtUp counts events delivered before the first caught-up
	// of each subscription, summed.
	beforeCaughtUp atomic.Int64
}

func (c *countingStore) ReadStream(ctx context.Context, stream string) ([]domain.RecordedEvent, error) {
	c.mu.Lock()
	c.reads[stream]++
	c.mu.Unlock()
	return c.Store.ReadStream(ctx, stream)
}

func (c *countingStore) SubscribeAll(ctx context.Context, from domain.SubscribeFrom, prefix string, handle func(domain.SubscriptionItem) error) error {
	caughtUp := false
	return c.Store.SubscribeAll(ctx, from, prefix, func(it domain.SubscriptionItem) error {
		if it.CaughtUp {
			caughtUp = true
		} else if !caughtUp {
			c.beforeCaughtUp.Add(1)
		}
		return handle(it)
	})
}

func (c *countingStore) streamsRead() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.reads {
		out[k] = v
	}
	return out
}

type workflows map[string]*domain.Workflow

func (w workflows) Workflow(_ context.Context, name string, _ int) (*domain.Workflow, error) {
	if wf, ok := w[name]; ok {
		return wf, nil
	}
	return nil, domain.ErrUnknownWorkflow
}

type owningNothing struct{}

func (owningNothing) Owns(string) bool { return false }

type leading bool

func (l leading) IsLeader() bool { return bool(l) }

type alerts struct {
	mu   sync.Mutex
	seen map[string]int
}

func (a *alerts) RaiseAlert(_ context.Context, al protocol.Alert) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen[al.TaskID]++
	return nil
}

type dropLetters struct{}

func (dropLetters) DeadLetter(context.Context, processes.Inbound, string) error { return nil }

// agent answers commands through the scheduler, as the replies topic
// would, except for the attempts hung says to leave unanswered.
type agent struct {
	scheduler *processes.Scheduler
	hung      func(protocol.ExecuteStep) bool
	ctx       context.Context
}

func (a *agent) SendCommand(_ context.Context, cmd protocol.ExecuteStep) error {
	if a.hung(cmd) {
		return nil
	}
	reply := protocol.StepReply{TaskID: cmd.TaskID, Step: cmd.Step, Action: cmd.Action, Attempt: cmd.Attempt,
		Outcome: protocol.OutcomeSucceeded, Result: json.RawMessage(`{}`)}
	body, err := json.Marshal(reply)
	if err != nil {
		return err
	}
	go func() {
		_ = a.scheduler.HandleReply(a.ctx, processes.Inbound{Topic: protocol.RepliesTopic, Value: body})
	}()
	return nil
}

// history writes tasks straight to the store, deciding as the scheduler
// would, so that a test can make thousands of them quickly.
type history struct {
	t     *testing.T
	store *eventstore.Store
	now   time.Time
	// priority is that of the tasks written; empty for normal.
	priority domain.Priority
	// replyTo is the reply topic of the tasks written.
	replyTo string
}

// task writes a task of wf, with its first dispatch if dispatch, then the
// replies given and whatever the decisions after each make of it.
func (h history) task(id string, wf *domain.Workflow, dispatch bool, replies ...domain.Reply) {
	t := domain.NewTask(id)
	d := domain.Decision{Now: h.now, Actor: "history"}
	events := []domain.Event{domain.TaskSubmitted{TaskID: id, Workflow: wf.Name, WorkflowVersion: wf.Version, Steps: wf.StepNames(),
		Order: json.RawMessage(`{}`), SubmittedAt: h.now, Priority: h.priority, ReplyTo: h.replyTo}}
	t.Apply(events[0])
	decide := func(more []domain.Event) {
		for _, e := range more {
			t.Apply(e)
		}
		events = append(events, more...)
	}
	if dispatch {
		decide(t.Next(wf, d))
	}
	for _, r := range replies {
		r.Step = wf.Steps[0].Name
		more, err := t.RecordReply(wf, r, d)
		require.NoError(h.t, err)
		decide(more)
		decide(t.Next(wf, d))
	}
	var batch []domain.NewEvent
	for _, e := range events {
		data, err := domain.EncodeEvent(e)
		require.NoError(h.t, err)
		batch = append(batch, domain.NewEvent{Type: e.EventType(), Data: data, Metadata: domain.EventMetadata{CorrelationID: id, Actor: "history"}})
	}
	_, err := h.store.Append(context.Background(), domain.TaskStream(id), domain.ExpectNoStream(), batch...)
	require.NoError(h.t, err)
}

func oneStep(name string, budget time.Duration, onExhausted domain.ExhaustedPolicy) *domain.Workflow {
	return &domain.Workflow{Name: name, Version: 1, Steps: []domain.StepDefinition{{Name: "work", Agent: "worker", Budget: budget,
		MaxAttempts: 3, OnExhausted: onExhausted, Backoff: domain.Backoff{Initial: 300 * time.Millisecond, Multiplier: 2, Max: time.Second}}}}
}

// TestFollowersResumeFromTheirCheckpointReadingOnlyUnfinishedTasks builds
// a store with many finished tasks and a few unfinished ones: in flight
// with CompleteBy pending, with a retry due, pending, and one in Error. A
// first scheduler and supervisor fold it all and save checkpoints, without
// acting. A second pair starts from those checkpoints: it reads only the
// unfinished tasks' streams, is delivered only the events after the
// checkpoint, and still finishes every task: the hung attempts time out
// once and are retried, the due retries fire, the pending task and one
// submitted after the checkpoint run, and the task in Error is alerted.
func TestFollowersResumeFromTheirCheckpointReadingOnlyUnfinishedTasks(t *testing.T) {
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	raw, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false", srv.Addr()), logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })

	work, fragile := oneStep("work", 2*time.Second, domain.CompensateOnExhausted), oneStep("fragile", 2*time.Second, domain.ErrorOnExhausted)
	wfs := workflows{"work": work, "fragile": fragile}
	h := history{t: t, store: raw, now: time.Now()}
	ok := domain.Reply{Attempt: 1, Succeeded: true, Result: json.RawMessage(`{}`)}
	const finished = 1000
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < finished; i += 16 {
				h.task(fmt.Sprintf("done-%d", i), work, true, ok)
			}
		}()
	}
	wg.Wait()
	inFlight, retrying, pending := []string{"flight-1", "flight-2"}, []string{"retry-1", "retry-2"}, []string{"pending-1"}
	for _, id := range inFlight {
		h.task(id, work, true) // CompleteBy: 2 s from now
	}
	for _, id := range retrying {
		h.task(id, work, true, domain.Reply{Attempt: 1, Failure: domain.FailureTransient, Reason: "flaky"})
	}
	for _, id := range pending {
		h.task(id, work, false)
	}
	h.task("failed-1", fragile, true, domain.Reply{Attempt: 1, Failure: domain.FailurePermanent, Reason: "refused"})

	// The first pair folds everything from the start and saves checkpoints;
	// it owns no task and does not lead, so it changes nothing.
	first, stopFirst := context.WithCancel(context.Background())
	s1 := &processes.Scheduler{Store: raw, Commands: &agent{hung: func(protocol.ExecuteStep) bool { return true }}, DeadLetters: dropLetters{},
		Workflows: wfs, Actor: "scheduler/first", Clock: processes.SystemClock, Logger: logger, Ownership: owningNothing{}, Checkpoints: raw}
	v1 := &processes.Supervisor{Store: raw, Alerts: &alerts{seen: map[string]int{}}, Workflows: wfs, Actor: "supervisor/first",
		Clock: processes.SystemClock, Logger: logger, Leader: leading(false), Checkpoints: raw}
	var runs sync.WaitGroup
	for _, run := range []func(context.Context) error{s1.Run, v1.Run} {
		runs.Add(1)
		go func() { defer runs.Done(); _ = run(first) }()
	}
	require.Eventually(t, func() bool { return s1.Stats().Checkpoints > 0 && v1.Stats().Checkpoints > 0 }, 60*time.Second, 10*time.Millisecond)
	stopFirst()
	runs.Wait()
	full := s1.Stats().StartEvents
	assert.GreaterOrEqual(t, full, int64(3*finished), "the first scheduler read the whole history")

	// Submitted after the checkpoint.
	h.task("late-1", work, false)
	unfinished := append(append(append(append([]string{}, inFlight...), retrying...), pending...), "late-1")

	store := &countingStore{Store: raw, reads: map[string]int{}}
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	raised := &alerts{seen: map[string]int{}}
	s2 := &processes.Scheduler{Store: store, DeadLetters: dropLetters{}, Workflows: wfs, Actor: "scheduler/second", Clock: processes.SystemClock,
		Logger: logger, Checkpoints: raw}
	s2.Commands = &agent{scheduler: s2, ctx: c, hung: func(cmd protocol.ExecuteStep) bool {
		return strings.HasPrefix(cmd.TaskID, "flight") && cmd.Attempt == 1
	}}
	v2 := &processes.Supervisor{Store: store, Alerts: raised, Workflows: wfs, Actor: "supervisor/second", Clock: processes.SystemClock, Logger: logger,
		Interval: 50 * time.Millisecond, Checkpoints: raw}
	began := time.Now()
	go func() { _ = s2.Run(c) }()
	go func() { _ = v2.Run(c) }()
	<-s2.Ready()
	<-v2.Ready()
	t.Logf("second pair live in %v; first caught up over %d events", time.Since(began), full)

	final := map[string]*domain.Task{}
	require.Eventually(t, func() bool {
		for _, id := range unfinished {
			recorded, err := raw.ReadStream(c, domain.TaskStream(id))
			require.NoError(t, err)
			task := domain.NewTask(id)
			for _, r := range recorded {
				ev, err := r.Decode()
				require.NoError(t, err)
				task.Apply(ev)
			}
			if task.State != domain.StateProcessed {
				return false
			}
			final[id] = task
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "every unfinished task is processed")
	require.Eventually(t, func() bool { raised.mu.Lock(); defer raised.mu.Unlock(); return raised.seen["failed-1"] > 0 }, 10*time.Second, 10*time.Millisecond,
		"the task in Error is alerted after the restart")

	for _, id := range inFlight {
		recorded, err := raw.ReadStream(c, domain.TaskStream(id))
		require.NoError(t, err)
		timeouts := 0
		for _, r := range recorded {
			if r.Type == (domain.StepTimedOut{}).EventType() {
				timeouts++
			}
		}
		assert.Equal(t, 1, timeouts, "%s: the hung attempt timed out once", id)
		assert.Equal(t, 2, final[id].Step("work").Attempt, "%s: retried after its timeout", id)
	}
	for _, id := range retrying {
		assert.Equal(t, 2, final[id].Step("work").Attempt, "%s: the due retry fired", id)
	}

	// What the second pair read: the checkpoint's unfinished tasks (each
	// follower once) and nothing of the finished history.
	wantLoaded := len(inFlight) + len(retrying) + len(pending)
	assert.Equal(t, int64(wantLoaded), s2.Stats().StartLoads)
	assert.Equal(t, int64(wantLoaded+1), v2.Stats().StartLoads, "the supervisor's checkpoint names the task in Error too")
	for stream := range store.streamsRead() {
		assert.False(t, strings.HasPrefix(stream, "task-done-"), "a finished task's stream was read: %s", stream)
	}
	assert.LessOrEqual(t, store.beforeCaughtUp.Load(), int64(2*10), "only the events after the checkpoint are delivered at start")
	assert.LessOrEqual(t, s2.Stats().StartEvents, int64(10))
}

type statusSink struct{ published atomic.Int64 }

// forgettingSink is a statusSink that records the reply topics it is told
// to forget.
type forgettingSink struct {
	statusSink
	mu        sync.Mutex
	forgotten []string
}

func (s *forgettingSink) ForgetReplyTopics(topics []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgotten = append(s.forgotten, topics...)
}

func (s *forgettingSink) topics() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.forgotten...)
}

// TestStatusPublisherForgetsTheReplyTopicsOfFinishedTasks: once a task's
// statuses are flushed and it is finished, the sink is told to forget its
// reply topic (its Kafka client would name it in every metadata refresh,
// and create it again after the broker deleted it once idle); a topic an
// unfinished task names is kept.
func TestStatusPublisherForgetsTheReplyTopicsOfFinishedTasks(t *testing.T) {
	raw, logger := embeddedStore(t), quiet()
	work := oneStep("work", time.Minute, domain.CompensateOnExhausted)
	ok := domain.Reply{Attempt: 1, Succeeded: true, Result: json.RawMessage(`{}`)}
	history{t: t, store: raw, now: time.Now(), replyTo: "reply.done"}.task("done-1", work, true, ok)
	history{t: t, store: raw, now: time.Now(), replyTo: "reply.shared"}.task("done-2", work, true, ok)
	history{t: t, store: raw, now: time.Now(), replyTo: "reply.shared"}.task("running-1", work, true)

	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &forgettingSink{}
	p := &processes.StatusPublisher{Store: raw, Checkpoints: raw, Sink: sink, Logger: logger, Name: "status"}
	go func() { _ = p.Run(c) }()
	require.Eventually(t, func() bool { return len(sink.topics()) > 0 }, 30*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{"reply.done"}, sink.topics(), "reply.shared is still named by a running task")
}

func (s *statusSink) PublishStatus(context.Context, protocol.TaskStatus) { s.published.Add(1) }
func (s *statusSink) Flush(context.Context) error                        { return nil }

// TestStatusPublisherRestartsWithoutReadingFinishedTasks restarts the
// status publisher over a store of finished tasks: it publishes what came
// after its checkpoint and reads no finished task's stream.
func TestStatusPublisherRestartsWithoutReadingFinishedTasks(t *testing.T) {
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	raw, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false", srv.Addr()), logger)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	work := oneStep("work", time.Second, domain.CompensateOnExhausted)
	h := history{t: t, store: raw, now: time.Now()}
	ok := domain.Reply{Attempt: 1, Succeeded: true, Result: json.RawMessage(`{}`)}
	const finished = 200
	for i := range finished {
		h.task(fmt.Sprintf("done-%d", i), work, true, ok)
	}

	first, stop := context.WithCancel(context.Background())
	sink := &statusSink{}
	p1 := &processes.StatusPublisher{Store: raw, Checkpoints: raw, Sink: sink, Logger: logger, Name: "status"}
	go func() { _ = p1.Run(first) }()
	require.Eventually(t, func() bool {
		pos, ok, err := raw.LoadCheckpoint(context.Background(), "status")
		return err == nil && ok && pos > 0 && sink.published.Load() == 4*finished
	}, 30*time.Second, 10*time.Millisecond)
	stop()

	h.task("late-1", work, true, ok)
	store := &countingStore{Store: raw, reads: map[string]int{}}
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	again := &statusSink{}
	p2 := &processes.StatusPublisher{Store: store, Checkpoints: raw, Sink: again, Logger: logger, Name: "status"}
	go func() { _ = p2.Run(c) }()
	require.Eventually(t, func() bool { return again.published.Load() >= 4 }, 30*time.Second, 10*time.Millisecond)
	for stream := range store.streamsRead() {
		assert.False(t, strings.HasPrefix(stream, "task-done-"), "a finished task's stream was read: %s", stream)
	}
	assert.LessOrEqual(t, store.beforeCaughtUp.Load(), int64(4+4), "the restarted publisher starts at its checkpoint")
}
