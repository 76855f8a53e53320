package protocol_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestAgentViewSumsLiveInstances: totals count live instances only,
// capacity only of healthy ones, room as each health allows, and take the
// limits of the newest heartbeat.
func TestAgentViewSumsLiveInstances(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	instance := func(name, health string, capacity, inFlight int, sent time.Time, gone bool) protocol.AgentInstanceView {
		return protocol.AgentInstanceView{Gone: gone, AgentHeartbeat: protocol.AgentHeartbeat{Agent: "payment", Instance: name, Health: health,
			Capacity: capacity, InFlight: inFlight, At: sent, Waiting: map[domain.Priority]int{domain.PriorityHigh: 1, "urgent": 2}}}
	}
	newest := instance("p-2", protocol.HealthTrial, 4, 0, at.Add(time.Second), false)
	newest.GlobalLimit, newest.RateLimit = 10, &protocol.RateLimit{Calls: 5, PeriodMillis: 1000}
	v := protocol.NewAgentView("payment", true, []protocol.AgentInstanceView{
		instance("p-1", protocol.HealthHealthy, 8, 3, at, false),
		newest,
		instance("p-3", protocol.HealthUnhealthy, 8, 1, at, false),
		instance("p-4", protocol.HealthHealthy, 8, 0, at.Add(time.Hour), true),
	})
	assert.Len(t, v.Instances, 4)
	assert.Equal(t, protocol.AgentTotals{Live: 3, Healthy: 1, Capacity: 8, InFlight: 4, Room: 5 + 1,
		Waiting: map[domain.Priority]int{domain.PriorityHigh: 3, domain.PriorityNormal: 6}, GlobalLimit: 10,
		RateLimit: &protocol.RateLimit{Calls: 5, PeriodMillis: 1000}}, v.Totals)

	empty := protocol.NewAgentView("shipping", true, nil)
	assert.NotNil(t, empty.Instances, "an agent without instances has an empty list")
	assert.Zero(t, empty.Totals.Live)
}
