package processes

import (
	"slices"
	"sync"
	"time"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/dispatch"
)

// capacity is the scheduler's state of how much work each agent has: the
// attempts in flight by agent and instance, the dispatches that wait for
// room (woken, highest-ranked first, when room frees) and the instances
// that gave work back. Whether a dispatch may go, and to which instance,
// is dispatch policy (dispatch.View) over that state.
//
// Every scheduler instance folds every unfinished task, so the attempts in
// flight it counts are those of every scheduler, not only its own. Two
// schedulers may both admit the last free slot at once; the agent
// instance's own limit still holds.
type capacity struct {
	dir   AgentDirectory
	clock Clock
	aging time.Duration

	mu sync.Mutex
	// inflight is, by task, the attempt it has in flight; load counts
	// them by agent and instance.
	inflight map[string]route
	load     map[string]map[string]int
	// waiting is, by agent, the tasks that wait for room.
	waiting map[string]map[string]waiter
	// avoid is, by instance, when it gave an attempt back: it gets no work
	// until a heartbeat sent after that says it may.
	avoid map[string]time.Time
}

// route is where an attempt in flight went.
type route struct{ agent, instance string }

// waiter is a task waiting for room at an agent.
type waiter struct {
	priority domain.Priority
	since    time.Time
	wake     func()
}

func newCapacity(dir AgentDirectory, clock Clock, aging time.Duration) *capacity {
	return &capacity{dir: dir, clock: clock, aging: aging, inflight: map[string]route{}, load: map[string]map[string]int{},
		waiting: map[string]map[string]waiter{}, avoid: map[string]time.Time{}}
}

// setLocked notes task id's attempt in flight, or none (nil).
func (c *capacity) setLocked(id string, r *route) {
	if old, ok := c.inflight[id]; ok {
		if l := c.load[old.agent]; l != nil {
			if l[old.instance]--; l[old.instance] <= 0 {
				delete(l, old.instance)
			}
		}
		delete(c.inflight, id)
	}
	if r == nil {
		return
	}
	c.inflight[id] = *r
	l := c.load[r.agent]
	if l == nil {
		l = map[string]int{}
		c.load[r.agent] = l
	}
	l[r.instance]++
}

// forget drops what admit noted for a task whose decisions were not
// recorded: its load on an instance, its place among the waiting.
func (c *capacity) forget(id string) {
	if c == nil || c.dir == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLocked(id, nil)
	for _, ws := range c.waiting {
		delete(ws, id)
	}
}

// admit decides whether task t may dispatch to agent now, and to which
// instance; when it may not, t waits and wake is called once room may
// have freed. Higher-ranked waiters (domain.AgedRank) go first: a dispatch
// that ranks below one already waiting waits too.
func (c *capacity) admit(agent string, t *domain.Task, wake func()) domain.Admission {
	if c == nil || c.dir == nil {
		return domain.Admission{OK: true}
	}
	now := c.clock.Now()
	instances := c.dir.Instances(agent, now)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(instances) == 0 {
		delete(c.waiting[agent], t.ID)
		return domain.Admission{OK: true} // no heartbeats: as before capacity, by task id
	}
	// A task being dispatched has nothing else in flight (its steps and
	// compensations go one at a time): what was noted for it (the attempt
	// that just ended, or this dispatch when decided again after a
	// conflict) no longer holds.
	if old, had := c.inflight[t.ID]; had {
		c.setLocked(t.ID, nil)
		if old.agent != agent {
			// The attempt that just ended freed room at its agent: wake
			// whoever waits there (track sees no change once this
			// dispatch is noted).
			for _, wake := range c.wakeLocked(old.agent) {
				wake()
			}
		}
	}
	v := c.viewLocked(agent, instances)
	since := dispatch.WaitingSince(t, now)
	a := v.Admit(c.aheadLocked(agent, t, since, now))
	if !a.OK {
		ws := c.waiting[agent]
		if ws == nil {
			ws = map[string]waiter{}
			c.waiting[agent] = ws
		}
		ws[t.ID] = waiter{priority: t.Priority, since: since, wake: wake}
		return a
	}
	delete(c.waiting[agent], t.ID)
	c.setLocked(t.ID, &route{agent: agent, instance: a.Instance})
	return a
}

// aheadLocked counts the tasks waiting at agent that rank above t
// (domain.AgedRank), which go first.
func (c *capacity) aheadLocked(agent string, t *domain.Task, since, now time.Time) int {
	mine := domain.AgedRank(t.Priority, now.Sub(since), c.aging)
	ahead := 0
	for id, w := range c.waiting[agent] {
		if id != t.ID && domain.AgedRank(w.priority, now.Sub(w.since), c.aging) < mine {
			ahead++
		}
	}
	return ahead
}

// viewLocked is agent as dispatch policy sees it now.
func (c *capacity) viewLocked(agent string, instances []protocol.AgentHeartbeat) dispatch.View {
	return dispatch.View{Agent: agent, Instances: instances, Load: c.load[agent], Avoid: c.avoid}
}

// DefaultReturnPause is how long a step given back waits before it goes
// again when no instance of its agent may take it now (the scheduler knows
// none, or every one is unhealthy or gave work back).
const DefaultReturnPause = time.Second

// usable reports whether some live instance of agent may get work now.
func (c *capacity) usable(agent string, now time.Time) bool {
	if c == nil || c.dir == nil {
		return false
	}
	instances := c.dir.Instances(agent, now)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.viewLocked(agent, instances).AnyUsable()
}

// track notes the attempts t has in flight after an event; when one ended,
// the agent it freed room at wakes its waiters.
func (c *capacity) track(t *domain.Task) {
	if c == nil || c.dir == nil {
		return
	}
	var now *route
	if !t.State.Terminal() {
		for _, a := range t.InFlight() {
			now = &route{agent: a.Agent, instance: a.Instance}
			break
		}
	}
	c.mu.Lock()
	before, had := c.inflight[t.ID]
	if now != nil || had {
		c.setLocked(t.ID, now)
	}
	waiting := false
	if !t.State.Terminal() {
		for _, s := range t.Steps {
			waiting = waiting || s.Waiting() || s.Compensation.Waiting()
		}
	}
	// A task that finished, or whose step went, waits for nothing. One
	// that neither waits nor has anything in flight keeps a wait admit
	// noted: the append of its StepWaiting may have failed.
	if t.State.Terminal() || (!waiting && now != nil) {
		for _, ws := range c.waiting {
			delete(ws, t.ID)
		}
	}
	var wake []func()
	if had && (now == nil || now.agent != before.agent) {
		wake = c.wakeLocked(before.agent)
	}
	c.mu.Unlock()
	for _, w := range wake {
		w()
	}
}

// returned notes that instance gave an attempt back: it gets no new work
// until it says, in a later heartbeat, that it may.
func (c *capacity) returned(instance string) {
	if c == nil || instance == "" {
		return
	}
	c.mu.Lock()
	c.avoid[instance] = c.clock.Now()
	c.mu.Unlock()
}

// wakeLocked returns the wake calls of the best-ranked waiters of agent,
// as many as it has room for.
func (c *capacity) wakeLocked(agent string) []func() {
	ws := c.waiting[agent]
	if len(ws) == 0 {
		return nil
	}
	now := c.clock.Now()
	r := c.viewLocked(agent, c.dir.Instances(agent, now)).Room()
	if r.Free == 0 {
		return nil
	}
	type ranked struct {
		rank  int
		since time.Time
		wake  func()
	}
	all := make([]ranked, 0, len(ws))
	for _, w := range ws {
		all = append(all, ranked{domain.AgedRank(w.priority, now.Sub(w.since), c.aging), w.since, w.wake})
	}
	slices.SortFunc(all, func(a, b ranked) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return a.since.Compare(b.since)
	})
	out := make([]func(), 0, min(r.Free, len(all)))
	for _, w := range all[:min(r.Free, len(all))] {
		out = append(out, w.wake)
	}
	return out
}

// wakeAll wakes, for every agent with waiters, as many as it has room for:
// heartbeats may have brought room (an instance joined or recovered)
// without any attempt ending.
func (c *capacity) wakeAll() {
	if c == nil || c.dir == nil {
		return
	}
	c.mu.Lock()
	var wake []func()
	for agent := range c.waiting {
		wake = append(wake, c.wakeLocked(agent)...)
	}
	for inst, at := range c.avoid {
		if c.clock.Now().Sub(at) > time.Minute {
			delete(c.avoid, inst)
		}
	}
	c.mu.Unlock()
	for _, w := range wake {
		w()
	}
}

// waitingCount is how many tasks wait for room, by agent and priority.
func (c *capacity) waitingCount() map[string]map[domain.Priority]int {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]map[domain.Priority]int{}
	for agent, ws := range c.waiting {
		for _, w := range ws {
			if out[agent] == nil {
				out[agent] = map[domain.Priority]int{}
			}
			out[agent][w.priority.OrNormal()]++
		}
	}
	return out
}
