package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/console"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// fixedAgents is a view of agents that always shows the same list.
type fixedAgents struct{ list protocol.AgentList }

func (f fixedAgents) Agents(context.Context) (protocol.AgentList, error) { return f.list, nil }
func (f fixedAgents) Agent(_ context.Context, name string) (protocol.AgentView, bool, error) {
	for _, a := range f.list.Agents {
		if a.Name == name {
			return a, true, nil
		}
	}
	return protocol.AgentView{}, false, nil
}

func exampleAgents() protocol.AgentList {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	instance := func(name, health, reason string, gone bool) protocol.AgentInstanceView {
		return protocol.AgentInstanceView{Gone: gone, AgentHeartbeat: protocol.AgentHeartbeat{Agent: "payment", Instance: name, Health: health, Reason: reason,
			Capacity: 8, InFlight: 5, Waiting: map[domain.Priority]int{domain.PriorityHigh: 2, domain.PriorityLow: 1},
			Partitions: map[string][]int32{"saga.cmd.payment": {0, 1}}, StartedAt: at.Add(-time.Hour), At: at, ExpiresAt: at.Add(3 * time.Second)}}
	}
	payment := protocol.NewAgentView("payment", true, []protocol.AgentInstanceView{
		instance("pay-1", protocol.HealthHealthy, "", false),
		instance("pay-2", protocol.HealthUnhealthy, "breaker open: <script>alert(1)</script>", false),
		instance("pay-3", protocol.HealthHealthy, "", true),
	})
	payment.Queued = map[domain.Priority]int64{domain.PriorityHigh: 7, domain.PriorityNormal: 30, domain.PriorityLow: 0}
	shipping := protocol.NewAgentView("shipping", true, nil)
	shipping.QueueError = "kafka: no answer"
	stray := protocol.NewAgentView("stray", false, nil)
	return protocol.AgentList{At: at, Agents: []protocol.AgentView{payment, shipping, stray}}
}

// TestAgentsPageShowsInstancesTotalsAndQueues: each agent with its
// instances (gone ones marked), its totals over the live ones and its
// queued commands by band; an agent without instances and one no workflow
// names say so; what instances report is escaped.
func TestAgentsPageShowsInstancesTotalsAndQueues(t *testing.T) {
	tasks := newOneTask(t)
	srv := httptest.NewServer(console.Handler(console.Config{Tasks: tasks, History: tasks, Agents: fixedAgents{exampleAgents()}}))
	defer srv.Close()
	code, body := get(t, srv.Client(), srv.URL+"/ui/agents")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `<a href="/ui/agents">Agents</a>`, "in the nav")
	assert.Contains(t, body, `data-agent="payment"`)
	assert.Contains(t, body, "2 live, 1 healthy; in flight 10 of capacity 8 (room 3)")
	assert.Contains(t, body, "waiting 4/0/2; queued 7/30/0")
	assert.Contains(t, body, `<tr data-instance="pay-3" class="gone">`)
	assert.Contains(t, body, `gone (healthy)`)
	assert.Contains(t, body, `<span class="health unhealthy">unhealthy</span>`)
	assert.Contains(t, body, "<td>5 / 8</td><td>2/0/1</td>")
	assert.Contains(t, body, "breaker open: &lt;script&gt;")
	assert.NotContains(t, body, "<script>alert")
	assert.Contains(t, body, "queued <span class=\"error\">unknown: kafka: no answer</span>")
	assert.Contains(t, body, "No instance sends heartbeats.")
	assert.Contains(t, body, "(no registered workflow names it)")

	bare := httptest.NewServer(console.Handler(console.Config{Tasks: tasks, History: tasks}))
	defer bare.Close()
	code, body = get(t, bare.Client(), bare.URL+"/ui/agents")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "This process has no view of agents.")
}
