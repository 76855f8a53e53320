package protocol

import (
	"encoding/json"
	"time"

	"github.com/sagaengine/saga/domain"
)

// AgentsTopic carries the heartbeats of agent instances: a compacted
// topic keyed by instance, so that it holds the last heartbeat of every
// instance. An instance that stops cleanly writes a tombstone (a record
// with no value) under its key.
const AgentsTopic = "saga.agents"

// AgentHeartbeatMessageType is the type (ce_type header) of heartbeats.
const AgentHeartbeatMessageType = "saga.agent.heartbeat"

// Health of an agent instance.
const (
	// HealthHealthy instances take work up to their capacity.
	HealthHealthy = "healthy"
	// HealthUnhealthy instances take no new work: their breaker is open or
	// their calls hang. They give back the commands they receive
	// (OutcomeUnavailable).
	HealthUnhealthy = "unhealthy"
	// HealthTrial instances were unhealthy and try one call (the breaker's
	// half-open trial): they take one command at a time until a call
	// succeeds (healthy again) or fails (unhealthy again).
	HealthTrial = "trial"
	// HealthStopping instances are shutting down: they finish their calls
	// in flight and take no new work.
	HealthStopping = "stopping"
)

// DefaultHeartbeatEvery is how often an agent instance announces itself.
const DefaultHeartbeatEvery = time.Second

// RateLimit bounds how many calls an agent makes to its service per
// period, across all its instances.
type RateLimit struct {
	Calls int `json:"calls"`
	// PeriodMillis is the period in milliseconds.
	PeriodMillis int64 `json:"periodMillis"`
}

// Period is the limit's period.
func (r RateLimit) Period() time.Duration { return time.Duration(r.PeriodMillis) * time.Millisecond }

// AgentHeartbeat is what an agent instance announces about itself on
// AgentsTopic, keyed by Instance, every DefaultHeartbeatEvery (or its own
// interval, IntervalMillis) and at once when its health changes. The
// scheduler routes commands by it: only to healthy instances (one at a time
// to a trial one), never more at once to an agent than its instances'
// capacity (and its global limit) allow. An instance whose ExpiresAt has
// passed with no newer heartbeat is gone.
type AgentHeartbeat struct {
	Agent    string `json:"agent"`
	Instance string `json:"instance"`
	Health   string `json:"health"`
	// Reason says why an instance is not healthy: the failure that opened
	// its breaker, or how long its calls have hung.
	Reason string `json:"reason,omitempty"`
	// Capacity is how many calls the instance makes at once, at most.
	Capacity int `json:"capacity"`
	// InFlight is how many calls it is making now.
	InFlight int `json:"inFlight"`
	// Waiting counts the commands it holds until it has room, by priority
	// (high, normal, low).
	Waiting map[domain.Priority]int `json:"waiting,omitempty"`
	// GlobalLimit bounds the calls in flight across every instance of the
	// agent; 0 means no bound beyond the instances' capacity.
	GlobalLimit int `json:"globalLimit,omitempty"`
	// RateLimit bounds the agent's calls per period across its instances.
	RateLimit *RateLimit `json:"rateLimit,omitempty"`
	// Partitions lists, by command topic, the partitions the instance
	// consumes: a command produced to one of them goes to this instance.
	Partitions map[string][]int32 `json:"partitions,omitempty"`
	// Counters since the instance started.
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Returned  int64 `json:"returned"`
	Tries     int64 `json:"tries"`
	// StartedAt is when the instance started.
	StartedAt time.Time `json:"startedAt"`
	// At is when the heartbeat was sent; ExpiresAt is when the instance
	// counts as gone without a newer one (three intervals later).
	At        time.Time `json:"at"`
	ExpiresAt time.Time `json:"expiresAt"`
	// IntervalMillis is the instance's time between heartbeats, in
	// milliseconds; absent means DefaultHeartbeatEvery.
	IntervalMillis int64 `json:"intervalMillis,omitempty"`
}

// ParseAgentHeartbeat decodes and validates a heartbeat. Unknown fields are
// allowed, so that newer agents may say more.
func ParseAgentHeartbeat(body []byte) (AgentHeartbeat, error) {
	var h AgentHeartbeat
	if err := json.Unmarshal(body, &h); err != nil {
		return h, invalidf("heartbeat: %v", err)
	}
	switch {
	case h.Agent == "" || h.Instance == "":
		return h, invalidf("heartbeat lacks agent or instance")
	case h.Health != HealthHealthy && h.Health != HealthUnhealthy && h.Health != HealthTrial && h.Health != HealthStopping:
		return h, invalidf("heartbeat health %q is not %s, %s, %s or %s", h.Health, HealthHealthy, HealthUnhealthy, HealthTrial, HealthStopping)
	case h.Capacity < 0 || h.InFlight < 0 || h.GlobalLimit < 0:
		return h, invalidf("heartbeat capacity, inFlight and globalLimit must not be negative")
	case h.RateLimit != nil && (h.RateLimit.Calls < 1 || h.RateLimit.PeriodMillis < 1):
		return h, invalidf("heartbeat rateLimit needs calls and periodMillis of at least 1")
	case h.ExpiresAt.IsZero():
		return h, invalidf("heartbeat has no expiresAt")
	}
	return h, nil
}

// Live reports whether the instance counts as present at now.
func (h AgentHeartbeat) Live(now time.Time) bool { return now.Before(h.ExpiresAt) }

// Room is how many more calls a live instance takes now: capacity less in
// flight for a healthy one, at most one for a trial one, none otherwise.
func (h AgentHeartbeat) Room() int {
	switch h.Health {
	case HealthHealthy:
		return max(h.Capacity-h.InFlight, 0)
	case HealthTrial:
		return min(max(h.Capacity-h.InFlight, 0), 1)
	}
	return 0
}
