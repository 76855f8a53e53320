package engine_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/domain"
)

// TestParseRolesRefusesEmptyAndUnknownLists: a list naming no role, or an
// unknown one, is refused; all is the six roles, without the broker.
func TestParseRolesRefusesEmptyAndUnknownLists(t *testing.T) {
	for _, list := range []string{"", " ", ",", " , ", "schedular", "api,brokers"} {
		_, err := engine.ParseRoles(list)
		require.ErrorIs(t, err, engine.ErrRoles, "%q", list)
	}
	roles, err := engine.ParseRoles("all")
	require.NoError(t, err)
	assert.Equal(t, engine.AllRoles, roles)
	assert.NotContains(t, roles, engine.RoleBroker)
	roles, err = engine.ParseRoles(" broker ,api,api")
	require.NoError(t, err)
	assert.Equal(t, []engine.Role{engine.RoleBroker, engine.RoleAPI}, roles)
}

// TestBrokerRoleRunsTheBrokerAlone: the broker role alone runs the
// embedded Kafka broker and nothing else (no event store), and serves
// /healthz, /readyz (checking what it runs) and /metrics on HTTPListen,
// but no API. With external brokers it is refused.
func TestBrokerRoleRunsTheBrokerAlone(t *testing.T) {
	data := t.TempDir()
	app, err := engine.Start(engine.Config{DataDir: data, KafkaListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Roles: []engine.Role{engine.RoleBroker}, Logger: quiet()})
	require.NoError(t, err)
	defer app.Close()
	require.NotNil(t, app.EmbeddedBroker())
	assert.Nil(t, app.Store)
	assert.NoDirExists(t, filepath.Join(data, "eventstore"), "no embedded event store")

	base := "http://" + app.HTTPAddr
	code, body := get(t, base+"/readyz", "")
	assert.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, []string{"kafka", "resources"}, checkNames(t, body))
	code, _ = get(t, base+"/healthz", "")
	assert.Equal(t, http.StatusOK, code)
	code, body = get(t, base+"/metrics", "")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "saga_kafka_topics")
	code, _ = get(t, base+"/api/tasks", "")
	assert.Equal(t, http.StatusNotFound, code, "no task API without the api role")
	code, _ = get(t, base+"/ui/", "")
	assert.Equal(t, http.StatusNotFound, code, "no console without the api role")

	_, err = engine.Start(engine.Config{DataDir: t.TempDir(), KafkaBrokers: app.KafkaBrokers, Roles: []engine.Role{engine.RoleBroker}})
	require.ErrorIs(t, err, engine.ErrInvalidConfig)
	assert.ErrorContains(t, err, "broker role")
}

// TestAgentsProcessIsObservableAndStopsPromptly: an agents-only process
// serves the operational endpoints under the API's rules (tokens for
// /metrics, none for the probes), is ready once its consumer is in its
// group, and, with a call in flight that ignores cancellation, stops
// within its ShutdownTimeout.
func TestAgentsProcessIsObservableAndStopsPromptly(t *testing.T) {
	wf := &domain.Workflow{Name: "stuck", Steps: []domain.StepDefinition{{Name: "only", Agent: "stubborn", Budget: time.Minute, MaxAttempts: 1}}}
	core, err := engine.Start(engine.Config{DataDir: t.TempDir(), KafkaListen: "127.0.0.1:0", EventStoreListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Workflows: []*domain.Workflow{wf}, Logger: quiet(),
		Roles: []engine.Role{engine.RoleSubmitter, engine.RoleScheduler, engine.RoleSupervisor, engine.RoleAPI}})
	require.NoError(t, err)
	defer core.Close()

	tokens := filepath.Join(t.TempDir(), "tokens")
	secret, line, err := httpapi.NewToken("ops", httpapi.RoleViewer)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(tokens, []byte(line+"\n"), 0o600))
	called := make(chan struct{}, 1)
	never := make(chan struct{})
	defer close(never)
	agents, err := engine.Start(engine.Config{KafkaBrokers: core.KafkaBrokers, EventStoreURL: core.EventStoreURL, HTTPListen: "127.0.0.1:0",
		Roles: []engine.Role{engine.RoleAgents}, APITokensFile: tokens, ShutdownTimeout: 2 * time.Second, Logger: quiet(), Instance: "agents-1",
		Agents: map[string]agent.Handler{"stubborn": func(context.Context, agent.Request) (any, error) {
			called <- struct{}{}
			<-never // ignores its context
			return nil, nil
		}}})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			agents.Close()
		}
	}()

	base := "http://" + agents.HTTPAddr
	require.Eventually(t, func() bool { code, _ := get(t, base+"/readyz", ""); return code == http.StatusOK }, 30*time.Second, 50*time.Millisecond,
		"ready once its consumers are in their groups")
	_, body := get(t, base+"/readyz", "")
	assert.Equal(t, []string{"eventstore", "kafka", "followers", "consumers", "resources"}, checkNames(t, body))
	code, _ := get(t, base+"/metrics", "")
	assert.Equal(t, http.StatusUnauthorized, code, "/metrics needs a token, as on the API")
	code, body = get(t, base+"/metrics", secret)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "saga_agent_commands_total")
	code, _ = get(t, base+"/api/tasks", secret)
	assert.Equal(t, http.StatusNotFound, code)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Brokers: core.KafkaBrokers})
	require.NoError(t, err)
	defer c.Close()
	err = c.Submit(ctx, "stuck-1", map[string]any{"workflow": "stuck"})
	require.NoError(t, err)
	select {
	case <-called:
	case <-ctx.Done():
		t.Fatal("the agent was never called")
	}
	began := time.Now()
	agents.Close()
	closed = true
	assert.Less(t, time.Since(began), 4*time.Second, "Close waited past its ShutdownTimeout for a call that ignores cancellation")
}

// get answers a GET's status and body, with a bearer token when given.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// checkNames lists the checks of a /readyz answer.
func checkNames(t *testing.T, body string) []string {
	t.Helper()
	var answer struct {
		Checks []httpapi.Check `json:"checks"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &answer), body)
	var names []string
	for _, c := range answer.Checks {
		names = append(names, c.Name)
	}
	return names
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// TestCloseStillClosesTheEmbeddedServers: past its ShutdownTimeout, Close
// leaves a part that does not stop but still closes the embedded servers,
// so their data directory can be opened again at once.
func TestCloseStillClosesTheEmbeddedServers(t *testing.T) {
	wf := &domain.Workflow{Name: "stuck", Steps: []domain.StepDefinition{{Name: "only", Agent: "stubborn", Budget: time.Minute, MaxAttempts: 1}}}
	called := make(chan struct{}, 1)
	never := make(chan struct{})
	defer close(never)
	cfg := engine.Config{DataDir: t.TempDir(), KafkaListen: "127.0.0.1:0", EventStoreListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Workflows: []*domain.Workflow{wf}, Logger: quiet(), ShutdownTimeout: time.Second, CommandsThroughKafka: true,
		Agents: map[string]agent.Handler{"stubborn": func(context.Context, agent.Request) (any, error) {
			select {
			case called <- struct{}{}:
			default:
			}
			<-never // ignores its context
			return nil, nil
		}}}
	app, err := engine.Start(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Brokers: app.KafkaBrokers})
	require.NoError(t, err)
	require.NoError(t, c.Submit(ctx, "stuck-1", map[string]any{"workflow": "stuck"}))
	c.Close()
	select {
	case <-called:
	case <-ctx.Done():
		t.Fatal("the agent was never called")
	}
	began := time.Now()
	app.Close()
	assert.Less(t, time.Since(began), 4*time.Second)

	again, err := engine.Start(cfg)
	require.NoError(t, err, "the embedded servers' data is free again")
	again.Close()
}
