package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// Names of the agents' gauges.
const (
	AgentInstanceHealth   = "saga_agent_instance_health"
	AgentInstanceCapacity = "saga_agent_instance_capacity"
	AgentInstanceInFlight = "saga_agent_instance_in_flight"
	AgentInstanceWaiting  = "saga_agent_instance_waiting"
	AgentQueued           = "saga_agent_queued"
)

// healths are the values of the health label, one sample each.
var healths = []string{protocol.HealthHealthy, protocol.HealthUnhealthy, protocol.HealthTrial, protocol.HealthStopping}

// WatchAgents reports, at every scrape, the live agent instances that
// instances returns (their newest heartbeats): health (1 for the
// instance's, 0 for the others), capacity, calls in flight and commands
// waiting by priority, labelled by agent and instance. Gone instances are
// not reported, so the labels are only those of live instances. With
// queues, it also reports the commands queued in each agent's command
// topics by priority, as queues told at its newest read (a scrape waits
// for one at most ScrapeWait; none when it failed).
func (m *Metrics) WatchAgents(instances func() []protocol.AgentHeartbeat, queues func(context.Context) (map[string]map[domain.Priority]int64, error)) {
	each := func(emit func(protocol.AgentHeartbeat)) {
		for _, h := range instances() {
			emit(h)
		}
	}
	m.Register(
		Family{Name: AgentInstanceHealth, Type: prometheus.GaugeValue, Labels: []string{"agent", "instance", "health"},
			Help: "1 for the health of each live agent instance (healthy, unhealthy, trial, stopping), 0 for the other values, from its newest heartbeat.",
			Read: func(emit func(float64, ...string)) {
				each(func(h protocol.AgentHeartbeat) {
					for _, health := range healths {
						v := 0.0
						if h.Health == health {
							v = 1
						}
						emit(v, h.Agent, h.Instance, health)
					}
				})
			}},
		Family{Name: AgentInstanceCapacity, Type: prometheus.GaugeValue, Labels: []string{"agent", "instance"},
			Help: "How many calls a live agent instance makes at once, at most, from its newest heartbeat.",
			Read: func(emit func(float64, ...string)) {
				each(func(h protocol.AgentHeartbeat) { emit(float64(h.Capacity), h.Agent, h.Instance) })
			}},
		Family{Name: AgentInstanceInFlight, Type: prometheus.GaugeValue, Labels: []string{"agent", "instance"},
			Help: "Calls a live agent instance is making, from its newest heartbeat.",
			Read: func(emit func(float64, ...string)) {
				each(func(h protocol.AgentHeartbeat) { emit(float64(h.InFlight), h.Agent, h.Instance) })
			}},
		Family{Name: AgentInstanceWaiting, Type: prometheus.GaugeValue, Labels: []string{"agent", "instance", "priority"},
			Help: "Commands a live agent instance holds until it has room, by priority, from its newest heartbeat.",
			Read: func(emit func(float64, ...string)) {
				each(func(h protocol.AgentHeartbeat) {
					for _, p := range domain.Priorities() {
						emit(float64(h.Waiting[p]), h.Agent, h.Instance, string(p))
					}
				})
			}},
	)
	if queues == nil {
		return
	}
	queued := &cachedRead[map[string]map[domain.Priority]int64]{read: queues}
	m.Register(Family{Name: AgentQueued, Type: prometheus.GaugeValue, Labels: []string{"agent", "priority"},
		Help: "Commands in an agent's command topics that its consumer group has not consumed, by priority band, as the broker told at the newest read (a scrape waits for a read at most 250 ms).",
		Read: func(emit func(float64, ...string)) {
			byAgent, ok := queued.get()
			if !ok {
				return
			}
			for agent, queued := range byAgent {
				for _, p := range domain.Priorities() {
					emit(float64(queued[p]), agent, string(p))
				}
			}
		}})
}
