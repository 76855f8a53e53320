package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpapi"
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

// exampleAgents has every field of the agents' view set somewhere.
func exampleAgents() protocol.AgentList {
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	hb := protocol.AgentHeartbeat{Agent: "payment", Instance: "pay-1", Health: protocol.HealthUnhealthy, Reason: "breaker open", Capacity: 8, InFlight: 2,
		Waiting: map[domain.Priority]int{domain.PriorityHigh: 1}, GlobalLimit: 20, RateLimit: &protocol.RateLimit{Calls: 100, PeriodMillis: 1000},
		Partitions: map[string][]int32{"saga.cmd.payment": {0, 1}}, Succeeded: 10, Failed: 2, Returned: 1, Tries: 14,
		StartedAt: at.Add(-time.Hour), At: at, ExpiresAt: at.Add(3 * time.Second)}
	healthy := hb
	healthy.Instance, healthy.Health, healthy.Reason = "pay-2", protocol.HealthHealthy, ""
	payment := protocol.NewAgentView("payment", true, []protocol.AgentInstanceView{{AgentHeartbeat: hb}, {AgentHeartbeat: healthy, Gone: true}})
	payment.Queued = map[domain.Priority]int64{domain.PriorityHigh: 3, domain.PriorityNormal: 0, domain.PriorityLow: 12}
	shipping := protocol.NewAgentView("shipping", true, nil)
	shipping.QueueError = "kafka: no answer"
	return protocol.AgentList{At: at, Agents: []protocol.AgentView{payment, shipping}}
}

func agentsServer(t *testing.T, tokens *httpapi.Tokens) *httptest.Server {
	srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: newView(t), Metrics: checks{}, Readiness: checks{}, Tokens: tokens, Mounts: httpapi.AgentsAPI(fixedAgents{exampleAgents()})}))
	t.Cleanup(srv.Close)
	return srv
}

// TestAgentsAreServed: the list and each agent as JSON; an unknown agent
// is 404 and a query parameter 400.
func TestAgentsAreServed(t *testing.T) {
	srv := agentsServer(t, nil)
	resp, err := http.Get(srv.URL + "/api/agents")
	require.NoError(t, err)
	var list protocol.AgentList
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, exampleAgents(), list)

	resp, err = http.Get(srv.URL + "/api/agents/payment")
	require.NoError(t, err)
	var one protocol.AgentView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&one))
	resp.Body.Close()
	assert.Equal(t, exampleAgents().Agents[0], one)

	for path, code := range map[string]int{"/api/agents/nobody": 404, "/api/agents?agent=payment": 400, "/api/agents/payment?x=1": 400} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, code, resp.StatusCode, path)
	}
}

// TestAgentsNeedAToken: with tokens on, the agents' view is behind the
// guard like every other read.
func TestAgentsNeedAToken(t *testing.T) {
	secret, line, err := httpapi.NewToken("ann", httpapi.RoleViewer)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(file, []byte(line+"\n"), 0o600))
	tokens, err := httpapi.LoadTokens(file)
	require.NoError(t, err)
	srv := agentsServer(t, tokens)
	resp, err := http.Get(srv.URL + "/api/agents")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/agents", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

const agentsSchemaFile = "../../docs/agents.schema.json"

// TestServedAgentsMatchTheSchema validates what GET /api/agents and GET
// /api/agents/{name} serve against docs/agents.schema.json.
func TestServedAgentsMatchTheSchema(t *testing.T) {
	srv := agentsServer(t, nil)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	list, err := c.Compile(agentsSchemaFile)
	require.NoError(t, err)
	agent, err := c.Compile(agentsSchemaFile + "#/$defs/agent")
	require.NoError(t, err)
	for path, schema := range map[string]*jsonschema.Schema{"/api/agents": list, "/api/agents/payment": agent, "/api/agents/shipping": agent} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		doc, err := jsonschema.UnmarshalJSON(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, path)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.NoError(t, schema.Validate(doc), path)
	}
	bad := strings.Replace(mustJSON(t, exampleAgents().Agents[0]), `"health":"healthy"`, `"health":"sleepy"`, 1)
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(bad))
	require.NoError(t, err)
	assert.Error(t, agent.Validate(doc), "an unknown health")
}

// TestAgentsSchemaNamesTheFieldsOfTheViewTypes keeps docs/agents.schema.json
// and the Go types from drifting apart.
func TestAgentsSchemaNamesTheFieldsOfTheViewTypes(t *testing.T) {
	data, err := os.ReadFile(agentsSchemaFile)
	require.NoError(t, err)
	var root schemaObject
	require.NoError(t, json.Unmarshal(data, &root))
	for _, c := range []struct {
		schema schemaObject
		typ    any
	}{{root, protocol.AgentList{}}, {root.Defs["agent"], protocol.AgentView{}}, {root.Defs["instance"], protocol.AgentInstanceView{}},
		{root.Defs["totals"], protocol.AgentTotals{}}, {root.Defs["rateLimit"], protocol.RateLimit{}}} {
		all, required := fields(reflect.TypeOf(c.typ))
		names := make([]string, 0, len(c.schema.Properties))
		for k := range c.schema.Properties {
			names = append(names, k)
		}
		sort.Strings(names)
		sort.Strings(c.schema.Required)
		assert.Equal(t, all, names, "the fields of %T", c.typ)
		assert.Equal(t, required, c.schema.Required, "the required fields of %T", c.typ)
	}
}
