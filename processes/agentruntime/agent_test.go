package agentruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/agentruntime"
	"github.com/sagaengine/saga/processes/internal/agenttest"
	"github.com/sagaengine/saga/processes/port"
)

// command is a command message for a task, due by completeBy.
func command(task string, priority domain.Priority, completeBy time.Time) port.Inbound {
	body, _ := json.Marshal(protocol.ExecuteStep{TaskID: task, Workflow: "w", Step: "s", Agent: "payment", Action: protocol.ActionExecute,
		Attempt: 1, CompleteBy: completeBy, IdempotencyKey: task + "/s", Priority: priority})
	return port.Inbound{Topic: protocol.CommandTopicFor("payment", priority), Key: task, Value: body}
}

// handle runs HandleCommand in the background until the test ends, or
// until the returned function stops it (as a consumer that stops).
func handle(t *testing.T, a *agentruntime.Agent, msg port.Inbound) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.HandleCommand(ctx, msg) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// epoch is ahead of the wall clock: the calls' contexts end at their
// complete-by in real time.
var epoch = time.Date(2036, 3, 1, 12, 0, 0, 0, time.UTC)

func newTestAgent(clock port.Clock, svc *agenttest.Scripted, replies *agenttest.ReplyLog) *agentruntime.Agent {
	return &agentruntime.Agent{Name: "payment", Instance: "test-1", Handler: svc.Handle, Replies: replies, DeadLetters: dropLetters{},
		Clock: clock, Logger: quiet(), Backoff: domain.Backoff{Initial: time.Minute, Multiplier: 1, Max: time.Minute}}
}

// TestGateNeverExceedsCapacityAndServesHighFirst: with two places, two
// calls run; the commands that arrive meanwhile wait, and as places free
// up the high ones go first, whatever their order of arrival.
func TestGateNeverExceedsCapacityAndServesHighFirst(t *testing.T) {
	clock := newFakeClock(epoch)
	svc, replies := agenttest.NewScripted(), agenttest.NewReplyLog()
	a := newTestAgent(clock, svc, replies)
	a.Capacity = 2
	due := epoch.Add(time.Minute)
	holds := map[string]chan struct{}{}
	for _, task := range []string{"first", "second"} {
		holds[task] = svc.Hold(task)
		handle(t, a, command(task, domain.PriorityNormal, due))
		svc.AwaitStart(t)
	}
	waiting := []struct {
		task     string
		priority domain.Priority
	}{{"low-1", domain.PriorityLow}, {"normal-1", domain.PriorityNormal}, {"low-2", domain.PriorityLow},
		{"high-1", domain.PriorityHigh}, {"high-2", domain.PriorityHigh}}
	for i, w := range waiting {
		holds[w.task] = svc.Hold(w.task)
		handle(t, a, command(w.task, w.priority, due))
		require.Eventually(t, func() bool {
			n := 0
			for _, c := range a.Heartbeat().Waiting {
				n += c
			}
			return n == i+1
		}, 10*time.Second, time.Millisecond)
	}
	hb := a.Heartbeat()
	assert.Equal(t, map[domain.Priority]int{domain.PriorityHigh: 2, domain.PriorityNormal: 1, domain.PriorityLow: 2}, hb.Waiting)
	assert.Equal(t, 2, hb.InFlight)

	var order []string
	finish := "first"
	for range waiting {
		close(holds[finish])
		replies.Await(t, finish)
		finish = svc.AwaitStart(t)
		order = append(order, finish)
	}
	assert.Equal(t, []string{"high-1", "high-2", "normal-1", "low-1", "low-2"}, order)
	assert.EqualValues(t, 2, svc.Top.Load(), "never more calls than the capacity")
}

// TestGateUnderConcurrency: many commands at once through three places;
// the service never sees more than three calls, and every command is
// answered.
func TestGateUnderConcurrency(t *testing.T) {
	svc, replies := agenttest.NewScripted(), agenttest.NewReplyLog()
	a := newTestAgent(port.SystemClock, svc, replies)
	a.Capacity = 3
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := domain.Priorities()[i%3]
			assert.NoError(t, a.HandleCommand(context.Background(), command(fmt.Sprintf("t-%d", i), p, time.Now().Add(time.Minute))))
		}()
	}
	go func() {
		for range svc.Started {
		}
	}()
	wg.Wait()
	close(svc.Started)
	assert.EqualValues(t, 60, a.Stats().Succeeded)
	assert.LessOrEqual(t, svc.Top.Load(), int64(3))
}

// TestGlobalLimitIsSharedByInstances: a global limit of 5 over three
// instances (two others in the directory) leaves this one a single place.
func TestGlobalLimitIsSharedByInstances(t *testing.T) {
	clock := newFakeClock(epoch)
	svc, replies := agenttest.NewScripted(), agenttest.NewReplyLog()
	a := newTestAgent(clock, svc, replies)
	a.Capacity, a.GlobalLimit = 10, 5
	a.Directory = fixedDirectory{"payment": {{Instance: "other-1"}, {Instance: "other-2"}}}
	hold := svc.Hold("a")
	handle(t, a, command("a", domain.PriorityNormal, epoch.Add(time.Minute)))
	svc.AwaitStart(t)
	handle(t, a, command("b", domain.PriorityNormal, epoch.Add(time.Minute)))
	require.Eventually(t, func() bool { return a.Heartbeat().Waiting[domain.PriorityNormal] == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 1, a.Heartbeat().InFlight)
	close(hold)
	assert.Equal(t, "b", svc.AwaitStart(t))
}

type fixedDirectory map[string][]protocol.AgentHeartbeat

func (d fixedDirectory) Instances(agent string, _ time.Time) []protocol.AgentHeartbeat {
	return d[agent]
}

// TestRateWindowNeverExceedsTheLimitInAnyWindow tries calls at random
// moments: no window of one period, wherever it starts, holds more than
// the limit, none starts within the first period, and a caller that waits
// what TryTake said gets its call.
func TestRateWindowNeverExceedsTheLimitInAnyWindow(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		period := time.Duration(100+rng.IntN(900)) * time.Millisecond
		limit := 1 + rng.IntN(8)
		w := agentruntime.NewRateWindow(limit, period, epoch)
		now := epoch
		var starts []time.Time
		for range 2000 {
			now = now.Add(time.Duration(rng.Int64N(int64(period) / 3)))
			wait := w.TryTake(now, limit)
			if wait == 0 {
				starts = append(starts, now)
				continue
			}
			if rng.IntN(2) == 0 {
				now = now.Add(wait)
				require.Zero(t, w.TryTake(now, limit), "a caller that waited gets its call")
				starts = append(starts, now)
			}
		}
		require.NotEmpty(t, starts)
		assert.False(t, starts[0].Before(epoch.Add(period)), "no call in the first period")
		for i, s := range starts {
			n := 0
			for _, o := range starts[i:] {
				if o.Sub(s) < period {
					n++
				}
			}
			require.LessOrEqual(t, n, limit, "seed %d: %d calls in the window from %s", seed, n, s.Sub(epoch))
		}
	}
}

// TestOpenBreakerMakesTheInstanceUnhealthyThenTrialThenHealthy: failures
// open the breaker; the instance is unhealthy, with the failure as the
// reason, and gives commands back without calling; after OpenFor it is in
// trial and lets one command through; a failed trial makes it unhealthy
// again, a successful one healthy.
func TestOpenBreakerMakesTheInstanceUnhealthyThenTrialThenHealthy(t *testing.T) {
	clock := newFakeClock(epoch)
	svc, replies := agenttest.NewScripted(), agenttest.NewReplyLog()
	a := newTestAgent(clock, svc, replies)
	a.Breaker = &agentruntime.Breaker{Window: 5 * time.Second, MinCalls: 2, FailureRatio: 0.8, OpenFor: time.Second, Clock: clock}
	due := func() time.Time { return clock.Now().Add(10 * time.Second) }
	down := errors.New("payment service answered 503: down")
	for _, task := range []string{"f-1", "f-2"} {
		svc.FailWith(task, down)
		require.NoError(t, a.HandleCommand(context.Background(), command(task, domain.PriorityNormal, due())))
		r := replies.Await(t, task)
		assert.Equal(t, protocol.OutcomeFailed, r.Outcome)
		assert.Equal(t, 1, r.Tries)
		assert.Equal(t, "test-1", r.Instance)
	}
	health, reason := a.Health()
	assert.Equal(t, protocol.HealthUnhealthy, health)
	assert.Contains(t, reason, "down")

	require.NoError(t, a.HandleCommand(context.Background(), command("back-1", domain.PriorityNormal, due())))
	r := replies.Await(t, "back-1")
	assert.Equal(t, protocol.OutcomeUnavailable, r.Outcome)
	assert.Zero(t, r.Tries)
	assert.Equal(t, down.Error(), r.Reason, "the root cause")
	assert.EqualValues(t, 2, svc.Calls.Load(), "a command given back calls nothing")

	clock.Advance(time.Second)
	health, _ = a.Health()
	require.Equal(t, protocol.HealthTrial, health)
	svc.FailWith("trial-1", down)
	require.NoError(t, a.HandleCommand(context.Background(), command("trial-1", domain.PriorityNormal, due())))
	assert.Equal(t, protocol.OutcomeFailed, replies.Await(t, "trial-1").Outcome)
	health, _ = a.Health()
	assert.Equal(t, protocol.HealthUnhealthy, health, "a failed trial")

	clock.Advance(time.Second)
	hold := svc.Hold("trial-2")
	handle(t, a, command("trial-2", domain.PriorityNormal, due()))
	svc.AwaitStartOf(t, "trial-2")
	require.NoError(t, a.HandleCommand(context.Background(), command("during-trial", domain.PriorityNormal, due())))
	assert.Equal(t, protocol.OutcomeUnavailable, replies.Await(t, "during-trial").Outcome, "one command at a time in a trial")
	close(hold)
	assert.Equal(t, protocol.OutcomeSucceeded, replies.Await(t, "trial-2").Outcome)
	health, reason = a.Health()
	assert.Equal(t, protocol.HealthHealthy, health)
	assert.Empty(t, reason)
	st := a.Stats()
	assert.EqualValues(t, 2, st.Returned)
	assert.EqualValues(t, 4, st.Tries)
}

// TestBreakerRefusingAfterTriesReportsTheRootCause: an attempt whose call
// failed, and whose retry the breaker then refused, fails transiently
// naming the failure, not the refusal; an attempt the breaker refuses
// from the start is given back.
func TestBreakerRefusingAfterTriesReportsTheRootCause(t *testing.T) {
	clock := newFakeClock(epoch)
	svc, replies := agenttest.NewScripted(), agenttest.NewReplyLog()
	a := newTestAgent(clock, svc, replies)
	a.Backoff = domain.Backoff{Initial: 10 * time.Millisecond, Multiplier: 1, Max: 10 * time.Millisecond}
	a.Breaker = &agentruntime.Breaker{Window: 5 * time.Second, MinCalls: 2, FailureRatio: 0.8, OpenFor: time.Minute, Clock: clock}
	down := errors.New("ledger database unreachable")
	require.NoError(t, a.Breaker.Allow())
	a.Breaker.Record(down) // one failure before: the next opens it
	svc.FailWith("x", down)
	handle(t, a, command("x", domain.PriorityNormal, epoch.Add(10*time.Second)))
	svc.AwaitStart(t)
	var r protocol.StepReply
	require.Eventually(t, func() bool {
		clock.Advance(10 * time.Millisecond) // the retry's backoff
		var ok bool
		r, ok = replies.Reply("x")
		return ok
	}, 10*time.Second, time.Millisecond)
	assert.Equal(t, protocol.OutcomeFailed, r.Outcome)
	assert.Equal(t, domain.FailureTransient, r.Failure)
	assert.Equal(t, 1, r.Tries)
	assert.Contains(t, r.Reason, "ledger database unreachable")
	assert.NotContains(t, r.Reason, "circuit breaker open")
	assert.EqualValues(t, 1, svc.Calls.Load())
}

// TestHangingCallsMakeTheInstanceUnhealthy: a call that runs past the
// latency budget with no other answer makes the instance unhealthy (the
// reason says how long); commands arriving then, and those waiting for a
// place, are given back. After OpenFor a trial that hangs too makes it
// unhealthy again; one that answers makes it healthy.
func TestHangingCallsMakeTheInstanceUnhealthy(t *testing.T) {
	clock := newFakeClock(epoch)
	svc, replies := agenttest.NewScripted(), agenttest.NewReplyLog()
	a := newTestAgent(clock, svc, replies)
	a.Capacity, a.HangAfter, a.OpenFor = 2, 2*time.Second, time.Second
	due := func() time.Time { return clock.Now().Add(time.Minute) }
	svc.Hold("hung-0")
	stop0 := handle(t, a, command("hung-0", domain.PriorityNormal, due()))
	svc.AwaitStart(t)
	svc.Hold("hung-1")
	handle(t, a, command("hung-1", domain.PriorityNormal, due()))
	svc.AwaitStart(t)
	handle(t, a, command("waiting", domain.PriorityHigh, due()))
	require.Eventually(t, func() bool { return a.Heartbeat().Waiting[domain.PriorityHigh] == 1 }, 10*time.Second, time.Millisecond)

	clock.Advance(2100 * time.Millisecond)
	health, reason := a.Health()
	assert.Equal(t, protocol.HealthUnhealthy, health)
	assert.Equal(t, "calls hang: oldest in flight 2.1s", reason)
	r := replies.Await(t, "waiting")
	assert.Equal(t, protocol.OutcomeUnavailable, r.Outcome, "a waiting command is given back")
	assert.Contains(t, r.Reason, "calls hang")
	require.NoError(t, a.HandleCommand(context.Background(), command("arriving", domain.PriorityNormal, due())))
	assert.Equal(t, protocol.OutcomeUnavailable, replies.Await(t, "arriving").Outcome)
	stop0() // a call cut off is no answer: room for a trial

	clock.Advance(time.Second)
	health, _ = a.Health()
	require.Equal(t, protocol.HealthTrial, health)
	svc.Hold("hung-2")
	stop2 := handle(t, a, command("hung-2", domain.PriorityNormal, due()))
	svc.AwaitStartOf(t, "hung-2")
	clock.Advance(2100 * time.Millisecond)
	health, _ = a.Health()
	assert.Equal(t, protocol.HealthUnhealthy, health, "a trial that hangs")
	stop2()

	clock.Advance(time.Second)
	health, _ = a.Health()
	require.Equal(t, protocol.HealthTrial, health)
	require.NoError(t, a.HandleCommand(context.Background(), command("quick", domain.PriorityNormal, due())))
	assert.Equal(t, protocol.OutcomeSucceeded, replies.Await(t, "quick").Outcome)
	health, _ = a.Health()
	assert.Equal(t, protocol.HealthHealthy, health, "a trial that answers")
	assert.EqualValues(t, 4, svc.Calls.Load(), "no call for the commands given back")
}

// TestHangThatRecovers: calls that hang and then answer make the instance
// healthy again without waiting for a trial.
func TestHangThatRecovers(t *testing.T) {
	clock := newFakeClock(epoch)
	svc, replies := agenttest.NewScripted(), agenttest.NewReplyLog()
	a := newTestAgent(clock, svc, replies)
	hold := svc.Hold("slow")
	handle(t, a, command("slow", domain.PriorityNormal, epoch.Add(time.Minute)))
	svc.AwaitStart(t)
	clock.Advance(3 * time.Second)
	health, reason := a.Health()
	require.Equal(t, protocol.HealthUnhealthy, health)
	assert.Equal(t, "calls hang: oldest in flight 3s", reason)
	close(hold)
	r := replies.Await(t, "slow")
	assert.Equal(t, protocol.OutcomeSucceeded, r.Outcome)
	assert.Equal(t, 1, r.Tries)
	health, _ = a.Health()
	assert.Equal(t, protocol.HealthHealthy, health)
}

// TestHandlerBreakerRefusalIsGivenBack: a handler that keeps its own
// breakers (the built-in HTTP agent) and refuses the first call: the
// attempt is given back with the root cause, and the instance reports the
// handler's open breaker.
func TestHandlerBreakerRefusalIsGivenBack(t *testing.T) {
	clock := newFakeClock(epoch)
	replies := agenttest.NewReplyLog()
	refusal := &agentruntime.CircuitOpenError{Until: epoch.Add(time.Second), Cause: "POST http://pay/charge answered 503"}
	a := &agentruntime.Agent{Name: "payment", Replies: replies, DeadLetters: dropLetters{}, Clock: clock, Logger: quiet(),
		Handler: func(context.Context, protocol.ExecuteStep) (json.RawMessage, error) {
			return nil, fmt.Errorf("host pay: %w", refusal)
		}}
	require.NoError(t, a.HandleCommand(context.Background(), command("h-1", domain.PriorityNormal, epoch.Add(time.Minute))))
	r := replies.Await(t, "h-1")
	assert.Equal(t, protocol.OutcomeUnavailable, r.Outcome)
	assert.Equal(t, "POST http://pay/charge answered 503", r.Reason)
	assert.Zero(t, r.Tries)
	assert.NotEmpty(t, r.Instance, "a default instance name")

	a2 := newTestAgent(clock, agenttest.NewScripted(), replies)
	a2.Breakers = func() agentruntime.BreakerState { return agentruntime.BreakerState{Open: true, Cause: "host pay: 503"} }
	health, reason := a2.Health()
	assert.Equal(t, protocol.HealthUnhealthy, health)
	assert.Equal(t, "host pay: 503", reason)
}

// TestRateLimitWaitsAPeriodAfterStart: the first call of an instance with
// a rate limit waits one period (and the margin that keeps calls the
// period apart at the service too); a command that cannot call before its
// complete-by is given back.
func TestRateLimitWaitsAPeriodAfterStart(t *testing.T) {
	clock := newFakeClock(epoch)
	svc, replies := agenttest.NewScripted(), agenttest.NewReplyLog()
	a := newTestAgent(clock, svc, replies)
	a.RateLimit = &protocol.RateLimit{Calls: 2, PeriodMillis: 1000}
	require.NoError(t, a.HandleCommand(context.Background(), command("soon", domain.PriorityNormal, epoch.Add(500*time.Millisecond))))
	r := replies.Await(t, "soon")
	assert.Equal(t, protocol.OutcomeUnavailable, r.Outcome)
	assert.Contains(t, r.Reason, "rate limit")

	handle(t, a, command("later", domain.PriorityNormal, epoch.Add(time.Minute)))
	require.Eventually(t, func() bool { return clock.Pending() > 0 }, 10*time.Second, time.Millisecond)
	assert.Zero(t, svc.Calls.Load())
	clock.Advance(1100 * time.Millisecond) // the period and its margin
	assert.Equal(t, protocol.OutcomeSucceeded, replies.Await(t, "later").Outcome)
	hb := a.Heartbeat()
	assert.Equal(t, &protocol.RateLimit{Calls: 2, PeriodMillis: 1000}, hb.RateLimit)
}

// beats records heartbeats and the instances that left.
type beats struct {
	got  chan protocol.AgentHeartbeat
	left chan string
}

func (b *beats) Beat(_ context.Context, hb protocol.AgentHeartbeat) error {
	b.got <- hb
	return nil
}

func (b *beats) Leave(_ context.Context, instance string) error {
	b.left <- instance
	return nil
}

// next waits for a heartbeat that satisfies ok.
func (b *beats) next(t *testing.T, ok func(protocol.AgentHeartbeat) bool) protocol.AgentHeartbeat {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case hb := <-b.got:
			if ok(hb) {
				return hb
			}
		case <-deadline:
			t.Fatal("no such heartbeat")
		}
	}
}

// TestRunAnnouncesHealthChangesAtOnce: Run sends a heartbeat at start,
// another as soon as the breaker opens (before the interval is up), and on
// stop says stopping, then leaves.
func TestRunAnnouncesHealthChangesAtOnce(t *testing.T) {
	clock := newFakeClock(epoch)
	svc, replies := agenttest.NewScripted(), agenttest.NewReplyLog()
	a := newTestAgent(clock, svc, replies)
	a.HeartbeatEvery = time.Hour
	a.Breaker = &agentruntime.Breaker{Window: 5 * time.Second, MinCalls: 1, FailureRatio: 0.8, OpenFor: time.Second, Clock: clock}
	hb := &beats{got: make(chan protocol.AgentHeartbeat, 100), left: make(chan string, 1)}
	a.Heartbeats = hb
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() {
		stopped <- a.Run(ctx, func(ctx context.Context) error { <-ctx.Done(); return nil })
	}()
	first := hb.next(t, func(protocol.AgentHeartbeat) bool { return true })
	assert.Equal(t, protocol.HealthHealthy, first.Health)
	assert.Equal(t, epoch.Add(3*time.Hour), first.ExpiresAt)

	svc.FailWith("f", errors.New("gateway timeout"))
	require.NoError(t, a.HandleCommand(context.Background(), command("f", domain.PriorityNormal, epoch.Add(time.Minute))))
	down := hb.next(t, func(h protocol.AgentHeartbeat) bool { return h.Health != protocol.HealthHealthy })
	assert.Equal(t, protocol.HealthUnhealthy, down.Health)
	assert.Equal(t, "gateway timeout", down.Reason)
	assert.Equal(t, epoch, down.At, "at once, not at the next interval")
	assert.EqualValues(t, 1, down.Tries)

	cancel()
	require.NoError(t, <-stopped)
	hb.next(t, func(h protocol.AgentHeartbeat) bool { return h.Health == protocol.HealthStopping })
	assert.Equal(t, "test-1", <-hb.left)
}

// TestNoRoomBeforeCompleteByGivesTheCommandBack: a command that waits for
// a place until its complete-by draws near is given back, uncalled, while
// a reply can still be sent.
func TestNoRoomBeforeCompleteByGivesTheCommandBack(t *testing.T) {
	clock := newFakeClock(epoch)
	svc, replies := agenttest.NewScripted(), agenttest.NewReplyLog()
	a := newTestAgent(clock, svc, replies)
	a.Capacity = 1
	svc.Hold("long")
	handle(t, a, command("long", domain.PriorityNormal, epoch.Add(time.Minute)))
	svc.AwaitStart(t)
	handle(t, a, command("short", domain.PriorityHigh, epoch.Add(time.Second)))
	require.Eventually(t, func() bool { return clock.Pending() > 0 }, 10*time.Second, time.Millisecond, "waiting, until 100 ms before its complete-by")
	clock.Advance(900 * time.Millisecond)
	r := replies.Await(t, "short")
	assert.Equal(t, protocol.OutcomeUnavailable, r.Outcome)
	assert.Equal(t, "no room before complete-by: capacity 1 in use", r.Reason)
	assert.EqualValues(t, 1, svc.Calls.Load())
}

// TestHealthByTargetKeepsTheInstanceHealthyWhileOneTargetHangs: with
// HealthByTarget, a call that hangs past HangAfter leaves the instance
// healthy, other commands still run, and a refusal naming a target is
// given back naming it.
func TestHealthByTargetKeepsTheInstanceHealthyWhileOneTargetHangs(t *testing.T) {
	clock := newFakeClock(epoch)
	svc, replies := agenttest.NewScripted(), agenttest.NewReplyLog()
	a := newTestAgent(clock, svc, replies)
	a.HealthByTarget, a.Capacity, a.HangAfter = true, 4, 2*time.Second
	due := func() time.Time { return clock.Now().Add(time.Minute) }
	svc.Hold("slow-host")
	handle(t, a, command("slow-host", domain.PriorityNormal, due()))
	svc.AwaitStart(t)
	clock.Advance(3 * time.Second)
	health, reason := a.Health()
	assert.Equal(t, protocol.HealthHealthy, health, reason)
	require.NoError(t, a.HandleCommand(context.Background(), command("fast-host", domain.PriorityNormal, due())))
	assert.Equal(t, protocol.OutcomeSucceeded, replies.Await(t, "fast-host").Outcome)

	svc.FailWith("refused", fmt.Errorf("host slow:80: %w", &agentruntime.CircuitOpenError{Until: due(), Cause: "host slow:80: calls hang", Target: "slow:80"}))
	require.NoError(t, a.HandleCommand(context.Background(), command("refused", domain.PriorityNormal, due())))
	r := replies.Await(t, "refused")
	assert.Equal(t, protocol.OutcomeUnavailable, r.Outcome)
	assert.Equal(t, "slow:80", r.Target)
	assert.Equal(t, "host slow:80: calls hang", r.Reason)
	health, _ = a.Health()
	assert.Equal(t, protocol.HealthHealthy, health)
}

// TestHandlerPanicFailsTheStepForGood: a handler that panics on a command
// would panic again on every retry and redelivery; the agent turns the
// panic into a permanent failure, with the panic's value as the reason,
// and the process goes on.
func TestHandlerPanicFailsTheStepForGood(t *testing.T) {
	usual := agenttest.NewReplyLog()
	ag := &agentruntime.Agent{Name: "worker", Instance: "here/worker", Replies: usual, DeadLetters: dropLetters{},
		Clock: port.SystemClock, Logger: quiet(),
		Handler: func(context.Context, protocol.ExecuteStep) (json.RawMessage, error) { panic("nil map in the handler") }}
	body, err := json.Marshal(protocol.ExecuteStep{TaskID: "panic-1", Workflow: "work", Step: "work", Agent: "worker", Action: protocol.ActionExecute,
		Attempt: 1, CompleteBy: time.Now().Add(10 * time.Second), IdempotencyKey: "panic-1/work"})
	require.NoError(t, err)
	require.NoError(t, ag.HandleCommand(context.Background(), port.Inbound{Topic: protocol.CommandTopic("worker"), Value: body}))
	r := usual.Await(t, "panic-1")
	assert.Equal(t, protocol.OutcomeFailed, r.Outcome)
	assert.Equal(t, domain.FailurePermanent, r.Failure)
	assert.Contains(t, r.Reason, "the handler panicked: nil map in the handler")
	assert.Equal(t, 1, r.Tries)
}
