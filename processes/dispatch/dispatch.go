// Package dispatch is saga's dispatch policy: how much work an agent takes
// now, given its instances' heartbeats and the attempts in flight, whether
// a dispatch may go, and to which agent instance. It only reads what it is
// given: the scheduler keeps the attempts in flight and the waiting
// dispatches, and the Kafka producer maps an instance to a partition.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package dispatch

import (
	"strconv"
	"time"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// View is one agent as the scheduler knows it at one moment.
//
// An attempt counts against the agent while it is in flight on an instance
// that is live and not unhealthy, or on no known instance (sent before the
// agent's heartbeats were known, or by a build that chose none): attempts
// hanging on an instance that turned unhealthy do not keep its healthy
// peers from taking new work.
type View struct {
	Agent string
	// Instances are the last heartbeats of the agent's live instances.
	Instances []protocol.AgentHeartbeat
	// Load counts the attempts in flight by instance; "" is no known
	// instance.
	Load map[string]int
	// Avoid is, by instance, when it gave an attempt back: it gets no work
	// until a heartbeat sent after that says it may.
	Avoid map[string]time.Time
	// Prefer, when set, names the instances Choose takes first: one of
	// them that may take the dispatch is chosen before any other (the
	// least loaded of them), so that a command stays in the scheduler's
	// process; the others get work only once those are full or unusable.
	Prefer func(instance string) bool
}

// Room is how much an agent takes now.
type Room struct {
	Limit, Used, Free, Healthy, Live int
	// Why is the first unhealthy instance's reason, when none is healthy.
	Why string
}

// Reason says why an agent with this room takes no dispatch now.
func (r Room) Reason(agent string) string {
	if r.Limit == 0 {
		s := "no healthy instance of " + agent + " (" + strconv.Itoa(r.Live) + " live)"
		if r.Why != "" {
			s += ": " + r.Why
		}
		return s
	}
	return "at capacity: " + agent + " takes " + strconv.Itoa(r.Limit) + " at once on " + strconv.Itoa(r.Healthy) + " healthy " +
		plural(r.Healthy, "instance", "instances")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Admit decides whether a dispatch to the agent may go now, and to which
// instance, when ahead dispatches that rank above it already wait: it may
// while the agent has room beyond those and some instance may take it. An
// agent that announces no instance admits every dispatch, to no instance
// (its commands go by task id).
func (v View) Admit(ahead int) domain.Admission {
	if len(v.Instances) == 0 {
		return domain.Admission{OK: true}
	}
	room := v.Room()
	instance, ok := v.Choose()
	if room.Free <= ahead || !ok {
		return domain.Admission{Reason: room.Reason(v.Agent)}
	}
	return domain.Admission{OK: true, Instance: instance}
}

// Usable reports whether an instance may get work: live, healthy or on
// trial, and not avoided since it gave an attempt back.
func (v View) Usable(h protocol.AgentHeartbeat) bool {
	if h.Health != protocol.HealthHealthy && h.Health != protocol.HealthTrial {
		return false
	}
	if at, ok := v.Avoid[h.Instance]; ok && !h.At.After(at) {
		return false
	}
	return true
}

// AnyUsable reports whether some live instance may get work now.
func (v View) AnyUsable() bool {
	for _, h := range v.Instances {
		if v.Usable(h) {
			return true
		}
	}
	return false
}

// Takes is how many calls at once an instance is given: its capacity when
// healthy, one on trial.
func Takes(h protocol.AgentHeartbeat) int {
	if h.Health == protocol.HealthTrial {
		return min(h.Capacity, 1)
	}
	return h.Capacity
}

// Room is how much the agent takes now: what its usable instances take
// (within the smallest GlobalLimit announced), less the attempts in flight
// that count against it.
func (v View) Room() Room {
	var r Room
	usable := map[string]bool{}
	global := 0
	for _, h := range v.Instances {
		r.Live++
		if h.GlobalLimit > 0 && (global == 0 || h.GlobalLimit < global) {
			global = h.GlobalLimit
		}
		if !v.Usable(h) {
			if r.Why == "" && h.Reason != "" {
				r.Why = h.Instance + ": " + h.Reason
			}
			continue
		}
		usable[h.Instance] = true
		r.Healthy++
		r.Limit += Takes(h)
	}
	if global > 0 {
		r.Limit = min(r.Limit, global)
	}
	for instance, n := range v.Load {
		if instance == "" || usable[instance] || !v.known(instance) {
			r.Used += n
		}
	}
	r.Free = max(r.Limit-r.Used, 0)
	return r
}

// known reports whether instance is among the live ones.
func (v View) known(instance string) bool {
	for _, h := range v.Instances {
		if h.Instance == instance {
			return true
		}
	}
	return false
}

// Choose picks the usable instance with the most room for its capacity; a
// trial instance only while it has nothing in flight. When some usable
// instance announces the partitions it consumes, only those that announce
// some are chosen (an instance that has none gets nothing through Kafka);
// when none does (agents that do not say), any usable one is, and the
// command goes by task id.
func (v View) Choose() (string, bool) {
	anyConsumes := false
	for _, h := range v.Instances {
		anyConsumes = anyConsumes || (v.Usable(h) && len(h.Partitions) > 0)
	}
	best, bestShare, bestPreferred := "", 2.0, false
	for _, h := range v.Instances {
		n := Takes(h)
		if !v.Usable(h) || n <= 0 || v.Load[h.Instance] >= n || (anyConsumes && !consumes(h, v.Agent)) {
			continue
		}
		preferred := v.Prefer != nil && v.Prefer(h.Instance)
		if bestPreferred && !preferred {
			continue
		}
		if share := float64(v.Load[h.Instance]) / float64(n); share < bestShare || (preferred && !bestPreferred) {
			best, bestShare, bestPreferred = h.Instance, share, preferred
		}
	}
	return best, best != ""
}

// consumes reports whether an instance announces a partition of one of
// agent's command topics.
func consumes(h protocol.AgentHeartbeat, agent string) bool {
	for _, topic := range protocol.CommandTopics(agent) {
		if len(h.Partitions[topic]) > 0 {
			return true
		}
	}
	return false
}

// WaitingSince is when a task began to wait for room: its waiting leg's
// start, or now.
func WaitingSince(t *domain.Task, now time.Time) time.Time {
	for _, s := range t.Steps {
		for _, l := range []*domain.Leg{&s.Leg, s.Compensation} {
			if l.Waiting() && l.WaitingSince.Before(now) {
				return *l.WaitingSince
			}
		}
	}
	return now
}
