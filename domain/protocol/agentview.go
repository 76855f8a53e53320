package protocol

import (
	"slices"
	"time"

	"github.com/sagaengine/saga/domain"
)

// AgentView is an agent as saga's HTTP API shows it (GET /api/agents/{name},
// and every agent of GET /api/agents): its instances as their heartbeats
// tell, totals over the live ones, and the commands queued for it.
// docs/agents.schema.json is its schema; like the messages, it only grows.
type AgentView struct {
	Name string `json:"name"`
	// Registered is set when a registered workflow has a step on the
	// agent; an agent known only from heartbeats has it unset.
	Registered bool                `json:"registered"`
	Instances  []AgentInstanceView `json:"instances"`
	Totals     AgentTotals         `json:"totals"`
	// Queued is how many commands wait in the agent's command topics, by
	// priority (band topic): the records past its consumer group's
	// committed offsets. Absent when it could not be read (QueueError).
	Queued map[domain.Priority]int64 `json:"queued,omitempty"`
	// QueueError says why Queued could not be read.
	QueueError string `json:"queueError,omitempty"`
	// Held is how many steps wait at the scheduler for room at the agent
	// (StepWaiting), by priority, as the scheduler in the serving process
	// counts them; absent when none waits or no scheduler runs there.
	Held map[domain.Priority]int `json:"held,omitempty"`
}

// AgentInstanceView is an instance of an agent: its newest heartbeat, and
// whether it is gone (its heartbeat expired; the API shows a gone instance
// for a minute).
type AgentInstanceView struct {
	AgentHeartbeat
	Gone bool `json:"gone"`
}

// AgentTotals sums an agent's live instances.
type AgentTotals struct {
	// Live counts the live instances; Healthy those of them healthy.
	Live    int `json:"live"`
	Healthy int `json:"healthy"`
	// Capacity is the capacity of the healthy instances.
	Capacity int `json:"capacity"`
	// InFlight counts the calls in flight on live instances.
	InFlight int `json:"inFlight"`
	// Room is how many more calls the live instances take now
	// (AgentHeartbeat.Room), before the global limit.
	Room int `json:"room"`
	// Waiting counts the commands the live instances hold, by priority.
	Waiting map[domain.Priority]int `json:"waiting"`
	// GlobalLimit and RateLimit are those of the newest heartbeat.
	GlobalLimit int        `json:"globalLimit,omitempty"`
	RateLimit   *RateLimit `json:"rateLimit,omitempty"`
}

// AgentList is the answer of GET /api/agents: every agent, by name.
type AgentList struct {
	Agents []AgentView `json:"agents"`
	// At is the time the list was made; instances are live or gone at it.
	At time.Time `json:"at"`
}

// NewAgentView returns the view of an agent with these instances (taken
// in order), its totals summed over the live ones; Queued is the caller's.
func NewAgentView(name string, registered bool, instances []AgentInstanceView) AgentView {
	v := AgentView{Name: name, Registered: registered, Instances: slices.Clone(instances),
		Totals: AgentTotals{Waiting: map[domain.Priority]int{}}}
	if v.Instances == nil {
		v.Instances = []AgentInstanceView{}
	}
	var newest time.Time
	for _, in := range instances {
		if in.Gone {
			continue
		}
		t := &v.Totals
		t.Live++
		if in.Health == HealthHealthy {
			t.Healthy++
			t.Capacity += in.Capacity
		}
		t.InFlight += in.InFlight
		t.Room += in.Room()
		for p, n := range in.Waiting {
			t.Waiting[domain.Priorities()[p.Rank()]] += n // an unknown priority counts as normal
		}
		if in.At.After(newest) || newest.IsZero() {
			newest, t.GlobalLimit, t.RateLimit = in.At, in.GlobalLimit, in.RateLimit
		}
	}
	return v
}
