package processes

import (
	"maps"
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
// flight it counts are those of every scheduler, not only its own. A
// dispatch reserves room only once it is stored (track), so two decisions
// (of two schedulers, or of two shards of one) may both admit the last
// free slot at once; the agent instance's own limit still holds.
type capacity struct {
	dir   AgentDirectory
	clock Clock
	aging time.Duration
	// prefer names the instances dispatches go to first
	// (dispatch.View.Prefer); nil prefers none.
	prefer func(instance string) bool

	mu sync.Mutex
	// inflight is, by task, the attempts it has in flight (several when
	// its workflow runs steps side by side); load counts them by agent and
	// instance.
	inflight map[string][]route
	load     map[string]map[string]int
	// waiting is, by agent, the tasks that wait for room.
	waiting map[string]*waiters
	// avoid is, by instance, when it gave an attempt back: it gets no work
	// until a heartbeat sent after that says it may.
	avoid map[string]time.Time
	// held is, by task, the dispatch a decision was admitted to while its
	// append is under way (hold): it counts as in flight until the
	// dispatch is stored (track) or the append fails (release).
	held map[string]route
	// freed counts, by agent, the times room may have freed there
	// (wakeLocked).
	freed map[string]uint64
}

// route is where an attempt in flight went.
type route struct{ agent, instance string }

func newCapacity(dir AgentDirectory, clock Clock, aging time.Duration) *capacity {
	return &capacity{dir: dir, clock: clock, aging: aging, inflight: map[string][]route{}, load: map[string]map[string]int{},
		waiting: map[string]*waiters{}, avoid: map[string]time.Time{}, freed: map[string]uint64{}, held: map[string]route{}}
}

// enabled reports whether the scheduler knows its agents' instances and so
// admits dispatches by their room.
func (c *capacity) enabled() bool { return c != nil && c.dir != nil }

// setLocked notes task id's attempts in flight, or none.
func (c *capacity) setLocked(id string, routes []route) {
	for _, old := range c.inflight[id] {
		if l := c.load[old.agent]; l != nil {
			if l[old.instance]--; l[old.instance] <= 0 {
				delete(l, old.instance)
			}
		}
	}
	delete(c.inflight, id)
	if len(routes) == 0 {
		return
	}
	c.inflight[id] = routes
	for _, r := range routes {
		l := c.load[r.agent]
		if l == nil {
			l = map[string]int{}
			c.load[r.agent] = l
		}
		l[r.instance]++
	}
}

// check decides, reading only, whether task t may dispatch to agent now,
// and to which instance (dispatch.View.Admit). Higher-ranked waiters
// (domain.AgedRank) go first: a dispatch that ranks below one already
// waiting is refused too. What is noted for t (the attempt that just
// ended, or one this very decision made before a conflict) does not
// count; own, the attempts t will have in flight besides this one (its
// steps that run side by side, and the dispatches decided before this one
// in the same decision), does. When it may not go, the refusal says how
// the task is to wait (wait).
func (c *capacity) check(agent string, t *domain.Task, own []domain.InFlightAttempt) (domain.Admission, *refusal) {
	if c == nil || c.dir == nil {
		return domain.Admission{OK: true}, nil
	}
	now := c.clock.Now()
	instances := c.dir.Instances(agent, now)
	c.mu.Lock()
	defer c.mu.Unlock()
	since := dispatch.WaitingSince(t, now)
	v := dispatch.View{Agent: agent, Instances: instances, Load: c.loadLocked(agent, t.ID, own), Avoid: c.avoid, Prefer: c.prefer}
	a := v.Admit(c.aheadLocked(agent, t, since, now))
	if a.OK {
		return a, nil
	}
	return a, &refusal{agent: agent, task: t.ID, priority: t.Priority, since: since, freed: c.freed[agent]}
}

// refusal is a dispatch check found no room for: the task waits at agent.
type refusal struct {
	agent, task string
	priority    domain.Priority
	since       time.Time
	// freed is capacity.freed of agent when the check was made.
	freed uint64
}

// loadLocked is how many attempts are in flight on each of agent's
// instances, stored or held, with what is noted for task except replaced
// by own, the attempts it is to have in flight.
func (c *capacity) loadLocked(agent, except string, own []domain.InFlightAttempt) map[string]int {
	load := maps.Clone(c.load[agent])
	if load == nil {
		load = map[string]int{}
	}
	for _, r := range c.inflight[except] {
		if r.agent != agent {
			continue
		}
		if load[r.instance]--; load[r.instance] <= 0 {
			delete(load, r.instance)
		}
	}
	for _, a := range own {
		if a.Agent == agent {
			load[a.Instance]++
		}
	}
	for id, r := range c.held {
		if id != except && r.agent == agent {
			load[r.instance]++
		}
	}
	return load
}

// hold takes the room a decision for task t admitted its last dispatch
// to (d, nil when it dispatches nothing) until the dispatch is stored,
// when the room is still there: the decision read the room without taking
// it, and another decided since may have taken it first. own are the
// other attempts t is to have in flight. It reports whether the decision
// stands; when it does not, the task is decided again, as after a
// conflict in the store.
func (c *capacity) hold(t *domain.Task, d *route, own []domain.InFlightAttempt) bool {
	if c == nil || c.dir == nil {
		return true
	}
	if d == nil {
		c.release(t.ID)
		return true
	}
	now := c.clock.Now()
	instances := c.dir.Instances(d.agent, now)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.held, t.ID)
	if len(instances) == 0 {
		return true // no heartbeats: no room to take
	}
	v := dispatch.View{Agent: d.agent, Instances: instances, Load: c.loadLocked(d.agent, t.ID, own), Avoid: c.avoid, Prefer: c.prefer}
	if a := v.Admit(c.aheadLocked(d.agent, t, dispatch.WaitingSince(t, now), now)); !a.OK || a.Instance != d.instance {
		return false
	}
	c.held[t.ID] = *d
	return true
}

// release drops the room held for task id's dispatch (hold): its append
// failed, or it is stored and counts as in flight.
func (c *capacity) release(id string) {
	if c == nil || c.dir == nil {
		return
	}
	c.mu.Lock()
	delete(c.held, id)
	c.mu.Unlock()
}

// wait notes that a task a check refused waits for room, once its
// decision is done; wake is called once room may have freed. When room
// may have freed since the check, it wakes the task at once, so that no
// wake falls between the check and the wait.
func (c *capacity) wait(r *refusal, wake func()) {
	if c == nil || c.dir == nil || r == nil {
		return
	}
	c.mu.Lock()
	ws := c.waiting[r.agent]
	if ws == nil {
		ws = newWaiters()
		c.waiting[r.agent] = ws
	}
	ws.put(waiter{task: r.task, priority: r.priority, since: r.since, wake: wake})
	missed := c.freed[r.agent] != r.freed
	c.mu.Unlock()
	if missed {
		wake()
	}
}

// aheadLocked counts the tasks waiting at agent that rank above t
// (domain.AgedRank), which go first.
func (c *capacity) aheadLocked(agent string, t *domain.Task, since, now time.Time) int {
	ws := c.waiting[agent]
	if ws == nil {
		return 0
	}
	return ws.ahead(t.ID, domain.AgedRank(t.Priority, now.Sub(since), c.aging), now, c.aging)
}

// viewLocked is agent as dispatch policy sees it now.
func (c *capacity) viewLocked(agent string, instances []protocol.AgentHeartbeat) dispatch.View {
	return dispatch.View{Agent: agent, Instances: instances, Load: c.loadLocked(agent, "", nil), Avoid: c.avoid, Prefer: c.prefer}
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

// track notes the attempts t has in flight once its events are stored (or
// folded from the store): a stored dispatch is the one thing that reserves
// room at its instance. When an attempt ended, the agent it freed room at
// wakes its waiters.
func (c *capacity) track(t *domain.Task) {
	if c == nil || c.dir == nil {
		return
	}
	var now []route
	if !t.State.Terminal() {
		for _, a := range t.InFlight() {
			now = append(now, route{agent: a.Agent, instance: a.Instance})
		}
	}
	c.mu.Lock()
	before, had := c.inflight[t.ID]
	if len(now) > 0 || had {
		c.setLocked(t.ID, now)
	}
	delete(c.held, t.ID)
	waiting := false
	if !t.State.Terminal() {
		for _, s := range t.Steps {
			waiting = waiting || s.Waiting() || s.Compensation.Waiting()
		}
	}
	// A task that finished, or whose step went, waits for nothing. One
	// that neither waits nor has anything in flight keeps a wait noted
	// (wait): the append of its StepWaiting may have failed.
	if t.State.Terminal() || (!waiting && len(now) > 0) {
		for _, ws := range c.waiting {
			ws.remove(t.ID)
		}
	}
	// An agent at which the task has fewer attempts in flight than before
	// has room that freed.
	var wake []func()
	for i, r := range before {
		if slices.IndexFunc(before[:i], func(o route) bool { return o.agent == r.agent }) < 0 && countAt(now, r.agent) < countAt(before, r.agent) {
			wake = append(wake, c.wakeLocked(r.agent)...)
		}
	}
	c.mu.Unlock()
	for _, w := range wake {
		w()
	}
}

// forgetWaits drops task id's waits, woken for room it cannot take (the
// shard no longer holds or owns it), and passes that room on: a wait left
// behind would otherwise take, at every wake, the place of a task that
// can use the room.
func (c *capacity) forgetWaits(id string) {
	if c == nil || c.dir == nil {
		return
	}
	c.mu.Lock()
	var wake []func()
	for agent, ws := range c.waiting {
		if _, ok := ws.byTask[id]; ok {
			ws.remove(id)
			wake = append(wake, c.wakeLocked(agent)...)
		}
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
	c.freed[agent]++
	ws := c.waiting[agent]
	if ws == nil || ws.len() == 0 {
		return nil
	}
	now := c.clock.Now()
	r := c.viewLocked(agent, c.dir.Instances(agent, now)).Room()
	if r.Free == 0 {
		return nil
	}
	return ws.best(r.Free, now, c.aging)
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
		if ws.len() == 0 {
			continue
		}
		out[agent] = map[domain.Priority]int{}
		ws.count(out[agent])
	}
	return out
}

// countAt counts the routes to agent.
func countAt(routes []route, agent string) int {
	n := 0
	for _, r := range routes {
		if r.agent == agent {
			n++
		}
	}
	return n
}
