package agentruntime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/port"
)

// Defaults of an agent instance.
const (
	// DefaultAgentCapacity bounds an instance's calls at once.
	DefaultAgentCapacity = 1024
	// DefaultHangAfter is the latency budget past which calls hang.
	DefaultHangAfter = 2 * time.Second
	// DefaultHealthOpenFor is how long an instance whose calls hang, with
	// no breaker to take the time from, stays unhealthy before a trial.
	DefaultHealthOpenFor = 2 * time.Second
)

// processInstance names this process among agent instances:
// hostname-pid-random.
var processInstance = sync.OnceValue(func() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "agent"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
})

// DefaultInstance is the instance name of an agent that was given none:
// hostname-pid-random/agent, unique to the process and the agent.
func DefaultInstance(agent string) string { return processInstance() + "/" + agent }

// agentState is what an agent instance knows of itself; Agent.mu guards
// it.
type agentState struct {
	started time.Time
	// admitted counts the commands that passed the gate and hold a place.
	admitted int
	// waiters are the commands waiting for a place, in arrival order.
	waiters []*gateWaiter
	// calls are the handler's calls in flight.
	calls map[*callRecord]struct{}
	// lastAnswer is when a call last ended with the service's answer
	// (not at its deadline, nor refused).
	lastAnswer time.Time
	// hangOpen says calls hang: unhealthy until hangUntil, then a trial.
	hangOpen   bool
	hangUntil  time.Time
	hangReason string
	lastScan   time.Time
	// trialBusy says the one command of a trial is under way.
	trialBusy  bool
	trialSince time.Time
	trialGen   int64
	health     string
	reason     string
	stopping   bool
	partitions map[string]map[int32]bool
	rate       *RateWindow
}

type callRecord struct{ start time.Time }

// gateWaiter is a command waiting at the gate.
type gateWaiter struct {
	priority domain.Priority
	since    time.Time
	// done receives the gate's answer, sent under Agent.mu once the
	// gateWaiter has left the waiters.
	done chan pass
}

// pass is the gate's answer to a command: admitted, or given back with a
// reason.
type pass struct {
	admitted bool
	trial    bool
	gen      int64
	reason   string
}

// rateMargin is how much longer than the rate limit's period the instance
// keeps its window: a call reaches the service a moment after it starts
// here, and those moments vary (connections, scheduling), so that calls a
// whole period apart here could arrive a little less apart there. A tenth
// of the period, from 5 ms to 100 ms, keeps the service's own count within
// the limit too.
func rateMargin(period time.Duration) time.Duration {
	return min(max(period/10, 5*time.Millisecond), 100*time.Millisecond)
}

// setup fills in the defaults; every entry point calls it.
func (a *Agent) setup() {
	a.setupOnce.Do(func() {
		if a.Instance == "" {
			a.Instance = DefaultInstance(a.Name)
		}
		if a.Capacity <= 0 {
			a.Capacity = DefaultAgentCapacity
		}
		if a.HangAfter <= 0 {
			a.HangAfter = DefaultHangAfter
		}
		if a.OpenFor <= 0 {
			a.OpenFor = DefaultHealthOpenFor
			if a.Breaker != nil && a.Breaker.OpenFor > 0 {
				a.OpenFor = a.Breaker.OpenFor
			}
		}
		if a.HeartbeatEvery <= 0 {
			a.HeartbeatEvery = protocol.DefaultHeartbeatEvery
		}
		a.kick = make(chan struct{}, 1)
		now := a.Clock.Now()
		a.st = agentState{started: now, calls: map[*callRecord]struct{}{}, partitions: map[string]map[int32]bool{},
			health: protocol.HealthHealthy}
		if a.RateLimit != nil {
			period := a.RateLimit.Period()
			a.st.rate = NewRateWindow(a.RateLimit.Calls, period+rateMargin(period), now)
		}
	})
}

// Health returns the instance's health now and, when it is not healthy,
// why: unhealthy while a breaker is open (the failure that opened it) or
// while calls hang (how long the oldest has run), trial once that has
// lasted OpenFor (one command goes through: its success makes the
// instance healthy, its failure or hang unhealthy again), stopping once
// Run's context has ended.
func (a *Agent) Health() (health, reason string) {
	a.setup()
	now := a.Clock.Now()
	a.mu.Lock()
	changed := a.refreshLocked(now)
	health, reason = a.st.health, a.st.reason
	a.mu.Unlock()
	if changed {
		a.poke()
	}
	return health, reason
}

// poke wakes Run's monitor to announce a change at once.
func (a *Agent) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// refreshLocked brings health up to date at now, gives waiting commands
// back or lets them in as it allows, and reports whether health changed.
// The caller holds mu.
func (a *Agent) refreshLocked(now time.Time) bool {
	a.checkHangLocked(now)
	health, reason := a.evaluateLocked(now)
	changed := health != a.st.health
	a.st.health, a.st.reason = health, reason
	a.pumpLocked(now)
	return changed
}

// checkHangLocked notes calls that hang: the oldest call started since the
// service last answered has run longer than HangAfter. The caller holds
// mu.
func (a *Agent) checkHangLocked(now time.Time) {
	if a.HealthByTarget {
		return // the handler judges each target's hangs
	}
	// A scan looks at every call in flight: at most one per twentieth of
	// the budget, which is precise enough.
	if !a.st.hangOpen && now.Sub(a.st.lastScan) < a.HangAfter/20 {
		return
	}
	a.st.lastScan = now
	var oldest, oldestUnanswered time.Time
	for c := range a.st.calls {
		if oldest.IsZero() || c.start.Before(oldest) {
			oldest = c.start
		}
		if !c.start.Before(a.st.lastAnswer) && (oldestUnanswered.IsZero() || c.start.Before(oldestUnanswered)) {
			oldestUnanswered = c.start
		}
	}
	if a.st.hangOpen {
		// A trial that hangs too: unhealthy again, and another trial
		// after OpenFor.
		if a.st.trialBusy && now.Sub(a.st.trialSince) > a.HangAfter && a.st.lastAnswer.Before(a.st.trialSince) {
			a.st.trialBusy = false
			a.st.hangUntil = now.Add(a.OpenFor)
			a.st.hangReason = hangReason(now.Sub(oldest))
		}
		return
	}
	if !oldestUnanswered.IsZero() && now.Sub(oldestUnanswered) > a.HangAfter {
		a.st.hangOpen, a.st.hangUntil, a.st.hangReason = true, now.Add(a.OpenFor), hangReason(now.Sub(oldest))
	}
}

func hangReason(age time.Duration) string {
	return "calls hang: oldest in flight " + age.Round(100*time.Millisecond).String()
}

// evaluateLocked derives health from the breakers and the hang state. The
// caller holds mu.
func (a *Agent) evaluateLocked(now time.Time) (string, string) {
	if a.st.stopping {
		return protocol.HealthStopping, "the instance is stopping"
	}
	bs := a.breakerState()
	switch {
	case bs.Open:
		return protocol.HealthUnhealthy, bs.Cause
	case a.st.hangOpen && now.Before(a.st.hangUntil):
		return protocol.HealthUnhealthy, a.st.hangReason
	case bs.Trial:
		return protocol.HealthTrial, bs.Cause
	case a.st.hangOpen:
		return protocol.HealthTrial, a.st.hangReason
	}
	return protocol.HealthHealthy, ""
}

// breakerState merges the agent's breaker and the handler's: open if one
// is, else in trial if one is.
func (a *Agent) breakerState() BreakerState {
	var states []BreakerState
	if a.Breaker != nil {
		states = append(states, a.Breaker.State())
	}
	if a.Breakers != nil {
		states = append(states, a.Breakers())
	}
	var out BreakerState
	for _, s := range states {
		switch {
		case s.Open && !out.Open:
			out = s
		case s.Trial && !out.Open && !out.Trial:
			out = s
		}
	}
	return out
}

// instances counts the live instances of the agent, this one included.
func (a *Agent) instances(now time.Time) int {
	if a.Directory == nil {
		return 1
	}
	k, self := 0, false
	for _, h := range a.Directory.Instances(a.Name, now) {
		k++
		self = self || h.Instance == a.Instance
	}
	if !self {
		k++
	}
	return k
}

// share is this instance's part of a limit of all the agent's instances:
// total / k rounded down, so that the parts never add up to more, and at
// least 1.
func (a *Agent) share(total int, now time.Time) int {
	return max(total/a.instances(now), 1)
}

// limit is how many commands may be under way at once now.
func (a *Agent) limit(now time.Time) int {
	if a.GlobalLimit > 0 {
		return min(a.Capacity, a.share(a.GlobalLimit, now))
	}
	return a.Capacity
}

// enter takes the command through the gate: admitted at once when the
// instance is healthy and has room, or as the one command of a trial;
// given back when it is neither; else it waits, best aged rank first,
// until it has room, the instance turns unhealthy, or giveUpAt passes.
// It returns an error only when ctx ends.
func (a *Agent) enter(ctx context.Context, cmd protocol.ExecuteStep, giveUpAt time.Time) (pass, error) {
	now := a.Clock.Now()
	a.mu.Lock()
	changed := a.refreshLocked(now)
	var p pass
	queued := false
	switch health := a.st.health; {
	case health == protocol.HealthHealthy && len(a.st.waiters) == 0 && a.st.admitted < a.limit(now):
		a.st.admitted++
		p = pass{admitted: true}
	case health == protocol.HealthTrial && !a.st.trialBusy && a.st.admitted < a.limit(now):
		p = a.admitTrialLocked(now)
	case health != protocol.HealthHealthy:
		p = pass{reason: a.st.reason}
	default:
		queued = true
	}
	if !queued {
		a.mu.Unlock()
		if changed {
			a.poke()
		}
		return p, nil
	}
	w := &gateWaiter{priority: cmd.Priority.OrNormal(), since: now, done: make(chan pass, 1)}
	a.st.waiters = append(a.st.waiters, w)
	a.pumpLocked(now)
	a.mu.Unlock()
	if changed {
		a.poke()
	}
	timer := a.Clock.NewTimer(giveUpAt.Sub(now))
	defer timer.Stop()
	select {
	case p := <-w.done:
		return p, nil
	case <-ctx.Done():
		if p, answered := a.withdraw(w); answered && p.admitted {
			a.leave(p, false)
		}
		return pass{}, ctx.Err()
	case <-timer.C():
		if p, answered := a.withdraw(w); answered {
			return p, nil
		}
		return pass{reason: "no room before complete-by: capacity " + strconv.Itoa(a.Capacity) + " in use"}, nil
	}
}

// withdraw takes w out of the waiters; if the gate answered it meanwhile,
// it returns that answer.
func (a *Agent) withdraw(w *gateWaiter) (pass, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i := slices.Index(a.st.waiters, w); i >= 0 {
		a.st.waiters = slices.Delete(a.st.waiters, i, i+1)
		return pass{}, false
	}
	return <-w.done, true
}

// admitTrialLocked lets a command in as the trial. The caller holds mu.
func (a *Agent) admitTrialLocked(now time.Time) pass {
	a.st.admitted++
	a.st.trialBusy, a.st.trialSince = true, now
	a.st.trialGen++
	return pass{admitted: true, trial: true, gen: a.st.trialGen}
}

// pumpLocked answers waiting commands: while healthy, lets them in as room
// allows, best aged rank first; in a trial, lets one in as the trial and
// gives the others back; otherwise gives them all back. The caller holds
// mu.
func (a *Agent) pumpLocked(now time.Time) {
	if len(a.st.waiters) == 0 {
		return
	}
	switch a.st.health {
	case protocol.HealthHealthy:
		for limit := a.limit(now); a.st.admitted < limit && len(a.st.waiters) > 0; {
			a.st.admitted++
			a.takeBestLocked(now).done <- pass{admitted: true}
		}
		return
	case protocol.HealthTrial:
		if !a.st.trialBusy && a.st.admitted < a.limit(now) {
			w := a.takeBestLocked(now)
			w.done <- a.admitTrialLocked(now)
		}
	}
	for _, w := range a.st.waiters {
		w.done <- pass{reason: a.st.reason}
	}
	clear(a.st.waiters)
	a.st.waiters = a.st.waiters[:0]
}

// takeBestLocked removes and returns the gateWaiter of the best aged rank, the
// one waiting longest on a tie. The caller holds mu.
func (a *Agent) takeBestLocked(now time.Time) *gateWaiter {
	best, bestRank := 0, 0
	for i, w := range a.st.waiters {
		rank := domain.AgedRank(w.priority, now.Sub(w.since), a.Aging)
		if i == 0 || rank < bestRank {
			best, bestRank = i, rank
		}
	}
	w := a.st.waiters[best]
	a.st.waiters = slices.Delete(a.st.waiters, best, best+1)
	return w
}

// leave gives back the place of an admitted command.
func (a *Agent) leave(p pass, succeeded bool) {
	now := a.Clock.Now()
	a.mu.Lock()
	a.st.admitted--
	if p.trial && a.st.trialBusy && a.st.trialGen == p.gen {
		a.st.trialBusy = false
		if !succeeded && a.st.hangOpen {
			a.st.hangUntil = now.Add(a.OpenFor)
		}
	}
	changed := a.refreshLocked(now)
	a.mu.Unlock()
	if changed {
		a.poke()
	}
}

// callStarted notes a call of the handler in flight.
func (a *Agent) callStarted() *callRecord {
	c := &callRecord{start: a.Clock.Now()}
	a.mu.Lock()
	a.st.calls[c] = struct{}{}
	a.mu.Unlock()
	return c
}

// callEnded notes the end of a call: answered when the service answered
// (not refused, not cut off at the deadline). An answer that succeeded
// ends a hang; a failure during a trial makes the instance unhealthy
// again.
func (a *Agent) callEnded(c *callRecord, err error, refused, inTime bool) {
	now := a.Clock.Now()
	a.mu.Lock()
	delete(a.st.calls, c)
	if !refused && inTime {
		a.st.lastAnswer = now
		if a.st.hangOpen {
			if err == nil || errors.Is(err, ErrPermanent) {
				a.st.hangOpen = false
			} else if !now.Before(a.st.hangUntil) {
				a.st.hangUntil = now.Add(a.OpenFor)
			}
		}
	}
	changed := a.refreshLocked(now)
	a.mu.Unlock()
	if changed {
		a.poke()
	}
}

// awaitRate waits until this instance's share of RateLimit lets a call
// start, and takes it. It reports false, with the reason, when that would
// be after giveUpAt, or when ctx ends.
func (a *Agent) awaitRate(ctx context.Context, giveUpAt time.Time) (string, bool) {
	if a.st.rate == nil {
		return "", true
	}
	for {
		now := a.Clock.Now()
		limit := a.share(a.RateLimit.Calls, now)
		w := a.st.rate.TryTake(now, limit)
		if w == 0 {
			return "", true
		}
		if now.Add(w).After(giveUpAt) {
			return "rate limit of " + strconv.Itoa(limit) + " calls per " + a.RateLimit.Period().String() + " (this instance's share) leaves no call before complete-by", false
		}
		if !port.Sleep(ctx, a.Clock, w) {
			return "", false
		}
	}
}

// Assigned notes command topic partitions assigned to this instance
// (kafka.ConsumerConfig.OnAssigned), to announce them.
func (a *Agent) Assigned(m map[string][]int32) {
	a.setup()
	a.mu.Lock()
	for topic, ids := range m {
		if a.st.partitions[topic] == nil {
			a.st.partitions[topic] = map[int32]bool{}
		}
		for _, id := range ids {
			a.st.partitions[topic][id] = true
		}
	}
	a.mu.Unlock()
	a.poke()
}

// Revoked notes partitions revoked from (or lost by) this instance.
func (a *Agent) Revoked(m map[string][]int32) {
	a.setup()
	a.mu.Lock()
	for topic, ids := range m {
		for _, id := range ids {
			delete(a.st.partitions[topic], id)
		}
		if len(a.st.partitions[topic]) == 0 {
			delete(a.st.partitions, topic)
		}
	}
	a.mu.Unlock()
	a.poke()
}

// Heartbeat returns what the instance announces now.
func (a *Agent) Heartbeat() protocol.AgentHeartbeat {
	a.setup()
	now := a.Clock.Now()
	a.mu.Lock()
	changed := a.refreshLocked(now)
	hb := protocol.AgentHeartbeat{Agent: a.Name, Instance: a.Instance, Health: a.st.health, Reason: a.st.reason,
		Capacity: a.Capacity, InFlight: a.st.admitted, GlobalLimit: a.GlobalLimit,
		Succeeded: a.succeeded.Load(), Failed: a.failed.Load(), Returned: a.returned.Load(), Tries: a.tries.Load(),
		StartedAt: a.st.started, At: now, ExpiresAt: now.Add(3 * a.HeartbeatEvery), IntervalMillis: a.HeartbeatEvery.Milliseconds()}
	for _, w := range a.st.waiters {
		if hb.Waiting == nil {
			hb.Waiting = map[domain.Priority]int{}
		}
		hb.Waiting[w.priority]++
	}
	for topic, ids := range a.st.partitions {
		if hb.Partitions == nil {
			hb.Partitions = map[string][]int32{}
		}
		list := make([]int32, 0, len(ids))
		for id := range ids {
			list = append(list, id)
		}
		slices.Sort(list)
		hb.Partitions[topic] = list
	}
	a.mu.Unlock()
	if a.RateLimit != nil {
		rl := *a.RateLimit
		hb.RateLimit = &rl
	}
	if changed {
		a.poke()
	}
	return hb
}

// Run runs the instance while consume (the loop that hands commands to
// HandleCommand, such as kafka.Consume) runs: it watches the instance's
// health, giving waiting commands back when it turns unhealthy, and
// announces it with Heartbeats every HeartbeatEvery and at once when its
// health or partitions change. When ctx ends the instance is stopping
// until consume returns; then it leaves (a tombstone).
func (a *Agent) Run(ctx context.Context, consume func(context.Context) error) error {
	if err := a.Validate(); err != nil {
		return err
	}
	a.setup()
	monitorCtx, stopMonitor := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.monitor(monitorCtx, ctx.Done())
	}()
	err := consume(ctx)
	stopMonitor()
	<-done
	if a.Heartbeats != nil {
		a.mu.Lock()
		a.st.stopping = true
		a.mu.Unlock()
		leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		a.beat(leaveCtx) // stopping, in case the monitor had not said so
		if lerr := a.Heartbeats.Leave(leaveCtx, a.Instance); lerr != nil {
			a.Logger.Warn("agent instance could not announce it left", "agent", a.Name, "instance", a.Instance, "err", lerr.Error())
		}
		cancel()
	}
	return err
}

// monitor refreshes health on a tick and sends heartbeats until ctx ends;
// once stopping is closed the instance is stopping.
func (a *Agent) monitor(ctx context.Context, stopping <-chan struct{}) {
	tick := min(max(a.HangAfter/4, time.Millisecond), 100*time.Millisecond)
	timer := a.Clock.NewTimer(tick)
	defer timer.Stop()
	var nextBeat time.Time
	for {
		now := a.Clock.Now()
		a.mu.Lock()
		changed := a.refreshLocked(now)
		a.mu.Unlock()
		if changed || !now.Before(nextBeat) {
			a.beat(ctx)
			nextBeat = now.Add(a.HeartbeatEvery)
		}
		select {
		case <-ctx.Done():
			return
		case <-stopping:
			stopping = nil
			a.mu.Lock()
			a.st.stopping = true
			a.mu.Unlock()
		case <-a.kick:
			nextBeat = time.Time{}
		case <-timer.C():
			timer.Reset(tick)
		}
	}
}

// beat publishes a heartbeat.
func (a *Agent) beat(ctx context.Context) {
	if a.Heartbeats == nil {
		return
	}
	hb := a.Heartbeat()
	beatCtx, cancel := context.WithTimeout(ctx, max(a.HeartbeatEvery, 5*time.Second))
	defer cancel()
	if err := a.Heartbeats.Beat(beatCtx, hb); err != nil && ctx.Err() == nil {
		a.Logger.Warn("agent heartbeat not sent", "agent", a.Name, "instance", a.Instance, "err", err.Error())
	}
}

// Validate reports every problem of the agent's configuration; the wiring
// calls it before commands are consumed.
func (a *Agent) Validate() error {
	p := port.Problems{Process: "agent " + a.Name}
	p.Require(a.Name != "", "Name")
	p.Require(a.Handler != nil, "Handler")
	p.Require(a.Replies != nil, "Replies")
	p.Require(a.DeadLetters != nil, "DeadLetters")
	p.Require(a.Clock != nil, "Clock")
	p.Require(a.Logger != nil, "Logger")
	if a.Backoff.Initial < 0 || a.Backoff.Max < 0 || a.Backoff.Multiplier < 0 {
		p.Add("Backoff must not be negative")
	}
	p.NotNegative(int64(a.Capacity), "Capacity")
	p.NotNegative(int64(a.GlobalLimit), "GlobalLimit")
	p.NotNegative(int64(a.Aging), "Aging")
	p.NotNegative(int64(a.HangAfter), "HangAfter")
	p.NotNegative(int64(a.OpenFor), "OpenFor")
	p.NotNegative(int64(a.HeartbeatEvery), "HeartbeatEvery")
	if r := a.RateLimit; r != nil && (r.Calls < 1 || r.PeriodMillis < 1) {
		p.Add("RateLimit needs at least 1 call and a period of at least 1ms")
	}
	return p.Err()
}
