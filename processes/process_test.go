package processes_test

import (
	"context"
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
	"github.com/sagaengine/saga/processes/agentruntime"
)

// embeddedStore starts the embedded event store on loopback and connects
// to it as the processes do.
func embeddedStore(t *testing.T) *eventstore.Store {
	t.Helper()
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	store, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false", srv.Addr()), quiet())
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	return store
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// eventTypes lists the wire names of a task's stream.
func eventTypes(t *testing.T, store processes.EventStore, id string) []string {
	t.Helper()
	recorded, err := store.ReadStream(context.Background(), domain.TaskStream(id))
	require.NoError(t, err)
	types := make([]string, len(recorded))
	for i, r := range recorded {
		types[i] = r.Type
	}
	return types
}

func count(types []string, want string) int {
	n := 0
	for _, ty := range types {
		if ty == want {
			n++
		}
	}
	return n
}

// run starts f until the test ends and returns a channel with its error.
func run(t *testing.T, f func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		assert.NoError(t, f(ctx))
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// countingAgent counts commands and answers them through the scheduler.
type countingAgent struct {
	agent
	sent atomic.Int64
}

func (a *countingAgent) SendCommand(ctx context.Context, cmd protocol.ExecuteStep) error {
	a.sent.Add(1)
	return a.agent.SendCommand(ctx, cmd)
}

// TestSchedulerDispatchesARetryWhenItsTimerFires resumes a task whose
// first attempt failed transiently: the retry is scheduled 300 ms later on
// the scheduler's clock. Nothing is dispatched until that clock passes it;
// then the retry goes out once and the task finishes.
func TestSchedulerDispatchesARetryWhenItsTimerFires(t *testing.T) {
	store := embeddedStore(t)
	clock := newFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	wf := oneStep("work", 2*time.Second, domain.CompensateOnExhausted)
	h := history{t: t, store: store, now: clock.Now()}
	h.task("retry-1", wf, true, domain.Reply{Attempt: 1, Failure: domain.FailureTransient, Reason: "flaky"})
	require.Equal(t, 1, count(eventTypes(t, store, "retry-1"), domain.StepRetryScheduledType))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent := &countingAgent{agent: agent{hung: func(protocol.ExecuteStep) bool { return false }, ctx: ctx}}
	s := &processes.Scheduler{Store: store, Commands: agent, DeadLetters: dropLetters{}, Workflows: workflows{"work": wf},
		Actor: "scheduler/test", Clock: clock, Logger: quiet(), Shards: 2}
	agent.scheduler = s
	run(t, s.Run)
	<-s.Ready()

	time.Sleep(200 * time.Millisecond) // real time: the clock stands still
	assert.Zero(t, agent.sent.Load(), "no retry before it is due")
	clock.Advance(250 * time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	assert.Zero(t, agent.sent.Load(), "no retry before it is due")

	clock.Advance(time.Second)
	require.Eventually(t, func() bool {
		return count(eventTypes(t, store, "retry-1"), domain.TaskProcessedType) == 1
	}, 10*time.Second, 10*time.Millisecond)
	assert.EqualValues(t, 1, agent.sent.Load(), "the retry was sent once")
	assert.Equal(t, 2, count(eventTypes(t, store, "retry-1"), domain.StepDispatchedType))
}

// racingStore holds the first two task appends until both have arrived, so
// that two writers decide on the same revision before either appends.
type racingStore struct {
	*eventstore.Store
	mu      sync.Mutex
	arrived int
	both    chan struct{}
}

func (r *racingStore) Append(ctx context.Context, stream string, expected domain.ExpectedRevision, events ...domain.NewEvent) (uint64, error) {
	if strings.HasPrefix(stream, domain.TaskStreamPrefix) {
		r.mu.Lock()
		r.arrived++
		switch r.arrived {
		case 1:
			r.mu.Unlock()
			select {
			case <-r.both:
			case <-time.After(5 * time.Second):
			}
		case 2:
			close(r.both)
			r.mu.Unlock()
		default:
			r.mu.Unlock()
		}
	}
	return r.Store.Append(ctx, stream, expected, events...)
}

// TestTwoSupervisorsTimeOutAnAttemptOnce runs two supervisors that both
// lead (the election is not what keeps them apart) over one task whose
// attempt is past CompleteBy. Both decide the timeout on the same revision;
// one append wins, the other conflicts, re-reads through the repository and
// finds the attempt no longer in flight. The stream holds one StepTimedOut.
func TestTwoSupervisorsTimeOutAnAttemptOnce(t *testing.T) {
	raw := embeddedStore(t)
	store := &racingStore{Store: raw, both: make(chan struct{})}
	clock := newFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	wf := oneStep("work", 2*time.Second, domain.CompensateOnExhausted)
	history{t: t, store: raw, now: clock.Now()}.task("hung-1", wf, true)

	var sups []*processes.Supervisor
	for i := range 2 {
		v := &processes.Supervisor{Store: store, Alerts: &alerts{seen: map[string]int{}}, Workflows: workflows{"work": wf},
			Actor: fmt.Sprintf("supervisor/%d", i), Clock: clock, Logger: quiet(), Interval: time.Second}
		run(t, v.Run)
		<-v.Ready()
		sups = append(sups, v)
	}
	clock.Advance(3 * time.Second) // past CompleteBy and the grace: both scan
	require.Eventually(t, func() bool {
		return sups[0].Stats().Timeouts+sups[1].Stats().Timeouts == 1 && sups[0].Stats().Conflicts+sups[1].Stats().Conflicts == 1
	}, 10*time.Second, 10*time.Millisecond, "one timeout, one conflict")
	clock.Advance(time.Second) // another scan each: nothing is left to time out
	time.Sleep(200 * time.Millisecond)
	assert.EqualValues(t, 1, sups[0].Stats().Timeouts+sups[1].Stats().Timeouts)
	types := eventTypes(t, raw, "hung-1")
	assert.Equal(t, 1, count(types, domain.StepTimedOutType), "%v", types)
	assert.Equal(t, 1, count(types, domain.StepRetryScheduledType), "%v", types)
}

// TestUnreadableEventStopsDecisions appends an event this version cannot
// read to a task in flight. The repository refuses to decide on it (an
// operator's cancel fails with domain.ErrUnreadableEvent and appends
// nothing), and so does the scheduler: a reply for the task is not turned
// into events.
func TestUnreadableEventStopsDecisions(t *testing.T) {
	store := embeddedStore(t)
	clock := newFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	wf := oneStep("work", 2*time.Second, domain.CompensateOnExhausted)
	history{t: t, store: store, now: clock.Now()}.task("odd-1", wf, true)
	_, err := store.Append(context.Background(), domain.TaskStream("odd-1"), domain.ExpectRevision(1),
		domain.NewEvent{Type: "FromTheFuture", Data: []byte(`{}`), Metadata: domain.EventMetadata{CorrelationID: "odd-1", Actor: "test"}})
	require.NoError(t, err)

	repo := processes.NewTaskRepository(store)
	op := &processes.Operator{Store: store, Workflows: workflows{"work": wf}, Clock: clock, Tasks: repo}
	err = op.Cancel(context.Background(), "odd-1", "alice", "")
	require.ErrorIs(t, err, domain.ErrUnreadableEvent)
	assert.EqualValues(t, 1, repo.Unreadable())

	s := &processes.Scheduler{Store: store, Commands: &agent{hung: func(protocol.ExecuteStep) bool { return true }}, DeadLetters: dropLetters{},
		Workflows: workflows{"work": wf}, Actor: "scheduler/test", Clock: clock, Logger: quiet(), Shards: 1}
	run(t, s.Run)
	<-s.Ready()
	body := []byte(`{"taskId":"odd-1","step":"work","action":"execute","attempt":1,"outcome":"succeeded","result":{}}`)
	err = s.HandleReply(context.Background(), processes.Inbound{Topic: protocol.RepliesTopic, Value: body})
	require.ErrorIs(t, err, domain.ErrUnreadableEvent)
	assert.Len(t, eventTypes(t, store, "odd-1"), 3, "nothing decided after the unreadable event")
}

// TestValidateListsEveryProblem checks that a process configured without
// its ports refuses to run and names each missing one.
func TestValidateListsEveryProblem(t *testing.T) {
	err := (&processes.Scheduler{Shards: -1}).Run(context.Background())
	require.ErrorIs(t, err, processes.ErrInvalidConfig)
	for _, want := range []string{"Store", "Commands", "DeadLetters", "Workflows", "Clock", "Logger", "Actor", "Shards"} {
		assert.Contains(t, err.Error(), want)
	}
	require.ErrorIs(t, (&processes.Supervisor{}).Run(context.Background()), processes.ErrInvalidConfig)
	require.ErrorIs(t, (&processes.StatusPublisher{}).Run(context.Background()), processes.ErrInvalidConfig)
	require.ErrorIs(t, (&processes.Submitter{}).Validate(), processes.ErrInvalidConfig)
	require.ErrorIs(t, (&agentruntime.Agent{}).Validate(), processes.ErrInvalidConfig)
}

// fickleLeader leads for its first calls, then not until told again.
type fickleLeader struct {
	calls, leadFor atomic.Int64
}

func (l *fickleLeader) IsLeader() bool { return l.calls.Add(1) <= l.leadFor.Load() }

// TestASupervisorStopsActingWhenItsLeaseLapsesMidScan: the lease is asked
// before each action, not only before a scan, so a leader whose lease
// lapses in the middle of a scan times out nothing more; what it left is
// timed out at a later scan once it leads again.
func TestASupervisorStopsActingWhenItsLeaseLapsesMidScan(t *testing.T) {
	store := embeddedStore(t)
	clock := newFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	wf := oneStep("work", 2*time.Second, domain.CompensateOnExhausted)
	for _, id := range []string{"lapse-1", "lapse-2"} {
		history{t: t, store: store, now: clock.Now()}.task(id, wf, true)
	}
	leader := &fickleLeader{}
	leader.leadFor.Store(2) // the scan's own question, then the first action's
	v := &processes.Supervisor{Store: store, Alerts: &alerts{seen: map[string]int{}}, Workflows: workflows{"work": wf},
		Actor: "supervisor/lapsing", Clock: clock, Logger: quiet(), Interval: time.Second, Leader: leader}
	run(t, v.Run)
	<-v.Ready()
	clock.Advance(3 * time.Second) // both attempts are due
	require.Eventually(t, func() bool { return leader.calls.Load() >= 3 }, 10*time.Second, 5*time.Millisecond, "the second action asked")
	timedOut := func() int {
		return count(eventTypes(t, store, "lapse-1"), domain.StepTimedOutType) + count(eventTypes(t, store, "lapse-2"), domain.StepTimedOutType)
	}
	assert.Equal(t, 1, timedOut(), "one attempt timed out before the lease lapsed, none after")

	leader.leadFor.Store(1 << 30)
	clock.Advance(time.Second)
	require.Eventually(t, func() bool { return timedOut() == 2 }, 10*time.Second, 5*time.Millisecond, "the other attempt is timed out once it leads again")
}
