package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/workflowfile"
	"github.com/sagaengine/saga/domain"
)

// hostileWorkflow parses a YAML definition for a test.
func hostileWorkflow(t *testing.T, doc string) *domain.Workflow {
	t.Helper()
	w, err := workflowfile.Parse("hostile.yaml", []byte(doc))
	require.NoError(t, err)
	return w
}

// TestHostile2RemoteServiceCannotSendTheHTTPAgentToSagaOrTheMetadataAddress
// (issue 24, item 1): a service that redirects the agent to saga's own API
// cancels nothing and has nothing of saga's stored as a result; a step
// following redirects stays on its host; saga's own listener and the
// link-local metadata address are refused at connection time.
func TestHostile2RemoteServiceCannotSendTheHTTPAgentToSagaOrTheMetadataAddress(t *testing.T) {
	var apiAddr atomic.Value
	apiAddr.Store("")
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api := "http://" + apiAddr.Load().(string)
		switch r.URL.Path {
		case "/cancel-other":
			w.Header().Set("Location", api+"/api/tasks/victim/cancel")
			w.WriteHeader(http.StatusTemporaryRedirect)
		case "/read-workflow":
			w.Header().Set("Location", api+"/api/workflows/victim")
			w.WriteHeader(http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(evil.Close)
	victim := &domain.Workflow{Name: "victim", Steps: []domain.StepDefinition{{Name: "wait", Agent: "gate", Budget: time.Minute, MaxAttempts: 1, Backoff: fastBackoff}}}
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{victim}, ExternalAgents: []string{"gate"}})
	apiAddr.Store(s.app.HTTPAddr)
	s.publish("victim", []byte(`{"orderId":"victim","workflow":"victim"}`))
	s.awaitTasks([]string{"victim"}, 30*time.Second, func(t *domain.Task) bool { return len(t.InFlight()) > 0 })

	for name, url := range map[string]string{
		"cancel":   evil.URL + "/cancel-other",
		"read":     evil.URL + "/read-workflow",
		"own":      "http://" + s.app.HTTPAddr + "/api/tasks/victim/cancel",
		"metadata": "http://169.254.169.254/latest/meta-data/",
	} {
		s.register(hostileWorkflow(t, `
name: hostile-`+name+`
steps:
  - name: call
    attempts: 2
    backoff: {initial: 10ms}
    http: {url: "`+url+`", followRedirects: `+map[bool]string{true: "true", false: "false"}[name == "cancel"]+`}
`))
		s.publish("hostile-"+name, []byte(`{"orderId":"hostile-`+name+`","workflow":"hostile-`+name+`"}`))
	}
	ids := []string{"hostile-cancel", "hostile-read", "hostile-own", "hostile-metadata"}
	tasks := s.awaitTerminal(ids, 60*time.Second)
	for _, id := range ids {
		task := tasks[id]
		assert.NotEqual(t, domain.StateProcessed, task.State, id)
		step := task.Step("call")
		assert.Empty(t, step.Result, "%s stored a result", id)
		assert.Equal(t, 1, step.FailureCount, "%s failed for good at once: %s", id, step.LastError)
	}
	assert.Contains(t, tasks["hostile-cancel"].Step("call").LastError, "redirect refused", "a followed redirect stays on its host")
	assert.Contains(t, tasks["hostile-read"].Step("call").LastError, "answered 302")
	assert.Contains(t, tasks["hostile-own"].Step("call").LastError, "saga's own listeners")
	assert.Contains(t, tasks["hostile-metadata"].Step("call").LastError, "link-local")

	assert.NotContains(t, types(s.stream("victim")), domain.TaskCancelledType, "the victim was cancelled through the agent")
}

// TestHostile2OneHangingHostHoldsNoOtherHTTPStep (issue 24, item 4): while
// a host's calls hang, a step of another workflow to another host runs at
// once, not behind the hanging one.
func TestHostile2OneHangingHostHoldsNoOtherHTTPStep(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	var hung atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hung.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }); slow.Close() })
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`{"ok":true}`)) }))
	t.Cleanup(fast.Close)
	const hangAfter = 500 * time.Millisecond
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{
		hostileWorkflow(t, "name: slow\nsteps:\n  - name: call\n    budget: 20s\n    attempts: 1\n    http: {url: \""+slow.URL+"/work\"}\n"),
		hostileWorkflow(t, "name: fast\nsteps:\n  - name: call\n    budget: 20s\n    attempts: 1\n    http: {url: \""+fast.URL+"/work\"}\n"),
	}, AgentInstances: engine.AgentInstances{HangAfter: map[string]time.Duration{domain.HTTPAgent: hangAfter}}})

	s.publish("slow-0", []byte(`{"orderId":"slow-0","workflow":"slow"}`))
	require.Eventually(t, func() bool { return hung.Load() == 1 }, 30*time.Second, 5*time.Millisecond)
	// Hanging is judged by the time a call has run: nothing to await.
	time.Sleep(2 * hangAfter)
	slowIDs := orderIDs("slow", 6)[1:]
	for _, id := range slowIDs {
		s.publish(id, []byte(`{"orderId":"`+id+`","workflow":"slow"}`))
	}
	require.Eventually(t, func() bool {
		for _, id := range slowIDs {
			seen := types(s.stream(id))
			if countOf(seen, domain.StepReturnedType)+countOf(seen, domain.StepWaitingType) == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "the steps to the hanging host are given back, or wait")

	start := time.Now()
	s.publish("fast-0", []byte(`{"orderId":"fast-0","workflow":"fast"}`))
	task := s.awaitTerminal([]string{"fast-0"}, 30*time.Second)["fast-0"]
	took := time.Since(start)
	require.Equal(t, domain.StateProcessed, task.State, task.Reason)
	assert.Less(t, took, 4*time.Second, "the step to the fast host waited behind the hanging one")
	assert.EqualValues(t, 1, hung.Load(), "the hanging host got only its first call")
	t.Logf("fast step finished %v after its order while another host hung", took.Round(time.Millisecond))
}

// TestHostile2SecretsStayInTheAgentsProcess (issue 24, item 11): a step's
// Authorization header names a secret; the service receives it, while the
// definition served to viewers, the events and the stored result hold
// only its name; a step naming a secret the process lacks fails for good
// naming it; a definition naming a secret badly is refused at
// registration.
func TestHostile2SecretsStayInTheAgentsProcess(t *testing.T) {
	const secret = "tok-7f3a9c-very-secret"
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "PAY_TOKEN"), []byte(secret+"\n"), 0o600))
	var mu sync.Mutex
	var got []string
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Authorization"))
		mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		// A service that echoes what it was sent.
		_, _ = w.Write([]byte(`{"auth":"` + r.Header.Get("Authorization") + `","body":` + string(bytes.TrimSpace(body)) + `}`))
	}))
	t.Cleanup(echo.Close)
	s := startSystem(t, engine.Config{SecretsDir: dir})
	s.register(hostileWorkflow(t, `
name: paid
steps:
  - name: charge
    http:
      url: "`+echo.URL+`/charge"
      headers: {Authorization: "Bearer {{ secret.PAY_TOKEN }}"}
      body: {key: "{{secret.PAY_TOKEN}}", order: "{{order.orderId}}"}
`))
	s.register(hostileWorkflow(t, `
name: unpaid
steps:
  - name: charge
    attempts: 3
    http:
      url: "`+echo.URL+`/charge"
      headers: {Authorization: "Bearer {{secret.MISSING_TOKEN}}"}
`))
	s.publish("paid-1", []byte(`{"orderId":"paid-1","workflow":"paid"}`))
	s.publish("unpaid-1", []byte(`{"orderId":"unpaid-1","workflow":"unpaid"}`))
	tasks := s.awaitTerminal([]string{"paid-1", "unpaid-1"}, 60*time.Second)

	paid := tasks["paid-1"]
	require.Equal(t, domain.StateProcessed, paid.State, paid.Reason)
	mu.Lock()
	assert.Equal(t, []string{"Bearer " + secret}, got, "the service received the secret, once")
	mu.Unlock()
	assert.Contains(t, string(paid.Step("charge").Result), "[secret PAY_TOKEN]", "the echo is stored redacted")

	unpaid := tasks["unpaid-1"]
	assert.NotEqual(t, domain.StateProcessed, unpaid.State)
	assert.Equal(t, 1, unpaid.Step("charge").FailureCount, "a missing secret fails for good")
	assert.Contains(t, unpaid.Step("charge").LastError, "secret MISSING_TOKEN is not set")

	for _, id := range []string{"paid-1", "unpaid-1"} {
		for _, e := range s.stream(id) {
			assert.NotContains(t, string(e.Data), secret, "event %s of %s", e.Type, id)
		}
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+s.app.HTTPAddr+"/api/workflows/paid", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	view, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(view))
	assert.NotContains(t, string(view), secret)
	assert.Contains(t, string(view), "secret.PAY_TOKEN")

	status, out := s.api(http.MethodPost, "/api/workflows", []byte(`{"name":"badsecret","steps":[{"name":"s","http":{"url":"`+echo.URL+`",
		"headers":{"Authorization":"{{secret.PAY-TOKEN}}"}}},{"name":"t","http":{"url":"`+echo.URL+`/{{secret.PAY_TOKEN}}"}}]}`))
	assert.Equal(t, http.StatusUnprocessableEntity, status, "%v", out)
	problems, err := json.Marshal(out)
	require.NoError(t, err)
	assert.Contains(t, string(problems), "secret name")
	assert.Contains(t, string(problems), "never in the url")
}
