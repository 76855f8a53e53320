package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/workflowfile"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
	"github.com/sagaengine/saga/processes/agentruntime"
	"github.com/sagaengine/saga/projections"
)

// shopWorkflow reads the user's workflow file, pointed at the shop service.
func shopWorkflow(t *testing.T, shopURL string) *domain.Workflow {
	t.Helper()
	data, err := os.ReadFile("testdata/workflows/shop.yaml")
	require.NoError(t, err)
	w, err := workflowfile.Parse("shop.yaml", bytes.ReplaceAll(data, []byte("SHOP"), []byte(shopURL)))
	require.NoError(t, err)
	return w
}

// api calls the system's HTTP API and decodes its JSON answer.
func (s *system) api(method, path string, body []byte) (int, map[string]any) {
	s.t.Helper()
	req, err := http.NewRequest(method, "http://"+s.app.HTTPAddr+path, bytes.NewReader(body))
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	var out map[string]any
	require.NoError(s.t, json.Unmarshal(raw, &out), string(raw))
	return resp.StatusCode, out
}

// register applies a definition through the HTTP API, as an operator's
// tooling would, and returns the version registered.
func (s *system) register(w *domain.Workflow) int {
	s.t.Helper()
	doc, err := w.MarshalDefinition()
	require.NoError(s.t, err)
	status, out := s.api(http.MethodPost, "/api/workflows", doc)
	require.Contains(s.t, []int{http.StatusCreated, http.StatusOK}, status, "%v", out)
	return int(out["version"].(float64))
}

// TestUserWorkflowRunsAgainstItsOwnServices drives a user-defined workflow
// of four HTTP steps, read from a YAML file, against services in another
// process: one order goes through; one whose shipping is refused for good
// is undone in reverse order, and each undo is handed the result of the
// step it undoes (the shop refuses to refund a payment it never took).
func TestUserWorkflowRunsAgainstItsOwnServices(t *testing.T) {
	shop := startShop(t)
	s := startSystem(t, engine.Config{})
	require.Equal(t, 1, s.register(shopWorkflow(t, shop)))

	s.publish("shop-ok", []byte(`{"orderId":"shop-ok","workflow":"shop","amount":42.5}`))
	s.publish("shop-refused", []byte(`{"orderId":"shop-refused","workflow":"shop","amount":10,"refuseShipping":true}`))
	tasks := s.awaitTerminal([]string{"shop-ok", "shop-refused"}, 60*time.Second)
	require.Equal(t, domain.StateProcessed, tasks["shop-ok"].State, tasks["shop-ok"].Reason)
	require.Equal(t, domain.StateCompensated, tasks["shop-refused"].State, tasks["shop-refused"].Reason)

	assert.Equal(t, []string{domain.TaskSubmittedType,
		domain.StepDispatchedType, domain.StepSucceededType, domain.StepDispatchedType, domain.StepSucceededType,
		domain.StepDispatchedType, domain.StepFailedType, domain.CompensationRequestedType,
		domain.CompensationDispatchedType, domain.StepCompensatedType, domain.CompensationDispatchedType, domain.StepCompensatedType,
		domain.TaskCompensatedType}, types(s.stream("shop-refused")))
	var undone []string
	for _, e := range s.stream("shop-refused") {
		if e.Type == domain.CompensationDispatchedType {
			ev, err := e.Decode()
			require.NoError(t, err)
			undone = append(undone, ev.(domain.CompensationDispatched).Step)
		}
	}
	assert.Equal(t, []string{"charge", "reserve"}, undone, "undone in reverse order; the refused step had no effect to undo")

	st := shopStateOf(t, shop)
	payment := st.Payments["shop-refused/charge"]
	reservation := st.Reservations["shop-refused/reserve"]
	require.NotEmpty(t, payment)
	assert.Equal(t, []string{payment}, st.Refunds, "the refund named the payment the charge step returned")
	assert.Equal(t, []string{reservation}, st.Releases, "the release named the reservation the reserve step returned")
	assert.Empty(t, st.Refused)
	assert.Equal(t, 1, st.Emails["shop-ok/confirm"], "the step without a compensation ran once")
	assert.Equal(t, "track-shop-ok", st.Shipments["shop-ok/ship"], "the URL template took the order id")

	// Results are part of the task's state, in the API and the audit.
	s.awaitView("shop-refused", domain.StateCompensated)
	view, _, _ := s.app.Tasks.Get(context.Background(), "shop-ok")
	var charge map[string]any
	require.NoError(t, json.Unmarshal(view.Task().Step("charge").Result, &charge))
	assert.Equal(t, 42.5, charge["amount"])
	audit, err := projections.BuildAudit("shop-refused", s.stream("shop-refused"), projections.Cut{})
	require.NoError(t, err)
	var details strings.Builder
	for _, r := range audit.Rows {
		details.WriteString(r.Details + "\n")
	}
	assert.Contains(t, details.String(), "workflow shop v1")
	assert.Contains(t, details.String(), payment)
}

// TestNewVersionWhileTasksAreInFlight registers a second version of a
// workflow while a task of the first waits on its agent: that task finishes
// on version 1, a new order runs version 2, and the audit shows both.
func TestNewVersionWhileTasksAreInFlight(t *testing.T) {
	gate := domain.StepDefinition{Name: "open-gate", Agent: "gate", Budget: 30 * time.Second, MaxAttempts: 1, Backoff: fastBackoff}
	v1 := &domain.Workflow{Name: "gated", Steps: []domain.StepDefinition{gate}}
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{v1}, ExternalAgents: []string{"gate"}})
	s.publish("gated-old", []byte(`{"orderId":"gated-old","workflow":"gated"}`))
	s.awaitTasks([]string{"gated-old"}, 30*time.Second, func(t *domain.Task) bool { return t.Step("open-gate").InFlight() })

	v2 := &domain.Workflow{Name: "gated", Steps: []domain.StepDefinition{gate, {Name: "log", Agent: "gate", Budget: 30 * time.Second,
		MaxAttempts: 1, Backoff: fastBackoff}}}
	require.Equal(t, 2, s.register(v2))
	require.Equal(t, 2, s.register(v2), "an identical definition makes no new version")
	s.publish("gated-new", []byte(`{"orderId":"gated-new","workflow":"gated"}`))
	s.publish("gated-pinned", []byte(`{"orderId":"gated-pinned","workflow":"gated","workflowVersion":1}`))

	// Now the gate's agent comes up and lets everything through.
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	client, err := kafka.NewClient(s.app.KafkaBrokers)
	require.NoError(t, err)
	agent := &agentruntime.Agent{Name: "gate", Replies: kafka.NewProducer(client, "test-gate", nil), DeadLetters: kafka.NewProducer(client, "test-gate", nil),
		Clock: processes.SystemClock, Logger: testLogger(),
		Handler: func(ctx context.Context, cmd protocol.ExecuteStep) (json.RawMessage, error) {
			return json.RawMessage(`{"opened":"` + cmd.TaskID + `"}`), nil
		}}
	go func() {
		done <- kafka.Consume(runCtx, kafka.ConsumerConfig{Brokers: s.app.KafkaBrokers, Group: "test-gate", Topics: []string{protocol.CommandTopic("gate")},
			Logger: testLogger()}, agent.HandleCommand)
	}()
	t.Cleanup(func() { stop(); <-done; client.Close() })

	tasks := s.awaitTerminal([]string{"gated-old", "gated-new", "gated-pinned"}, 60*time.Second)
	for id, want := range map[string]struct {
		version int
		steps   int
	}{"gated-old": {1, 1}, "gated-new": {2, 2}, "gated-pinned": {1, 1}} {
		task := tasks[id]
		assert.Equal(t, domain.StateProcessed, task.State, id)
		assert.Equal(t, want.version, task.WorkflowVersion, id)
		assert.Len(t, task.Steps, want.steps, id)
		audit, err := projections.BuildAudit(id, s.stream(id), projections.Cut{})
		require.NoError(t, err)
		assert.Contains(t, audit.Rows[0].Details, "workflow gated v"+string(rune('0'+want.version)), id)
	}
	status, out := s.api(http.MethodGet, "/api/workflows/gated/versions", nil)
	require.Equal(t, http.StatusOK, status)
	assert.Len(t, out["workflows"], 2)
}

// TestInvalidDefinitionsAreRefusedWithEveryProblem sends definitions with
// several problems each: all are listed, and nothing is registered.
func TestInvalidDefinitionsAreRefusedWithEveryProblem(t *testing.T) {
	s := startSystem(t, engine.Config{})
	bad := `{"name":"broken","colour":"red","steps":[
		{"name":"a","agent":"x","budget":"-1s"},
		{"name":"a","agent":"x"},
		{"name":"c"},
		{"name":"d","http":{"url":"http://svc/{{results.nope.id}}"}}]}`
	status, out := s.api(http.MethodPost, "/api/workflows", []byte(bad))
	require.Equal(t, http.StatusUnprocessableEntity, status, "%v", out)
	var paths []string
	for _, p := range out["problems"].([]any) {
		paths = append(paths, p.(map[string]any)["path"].(string))
	}
	assert.ElementsMatch(t, []string{"colour", "steps[0].budget", "steps[1].name", "steps[2].agent", "steps[3].http.url"}, paths)
	status, _ = s.api(http.MethodGet, "/api/workflows/broken", nil)
	assert.Equal(t, http.StatusNotFound, status, "nothing was registered")
	status, _ = s.api(http.MethodPost, "/api/workflows?dryRun=true", []byte(`{"name":"fine","steps":[{"name":"a","agent":"x"}]}`))
	assert.Equal(t, http.StatusOK, status)
	status, _ = s.api(http.MethodGet, "/api/workflows/fine", nil)
	assert.Equal(t, http.StatusNotFound, status, "a dry run registers nothing")
}

// TestUnknownWorkflowIsRejectedAtOnce sends an order for a workflow nobody
// registered through the Go client, which reports the rejection.
func TestUnknownWorkflowIsRejectedAtOnce(t *testing.T) {
	s := startSystem(t, engine.Config{})
	c, err := client.New(ctx(t, 10*time.Second), client.Config{Brokers: s.app.KafkaBrokers})
	require.NoError(t, err)
	defer c.Close()
	started := time.Now()
	outcome, err := c.Run(ctx(t, 20*time.Second), "rej-1", map[string]any{"workflow": "teleport"})
	require.ErrorIs(t, err, client.ErrRejected)
	assert.Contains(t, err.Error(), "teleport")
	assert.Equal(t, protocol.StatusRejected, outcome.Final.Status)
	assert.Less(t, time.Since(started), 10*time.Second)
	assert.Empty(t, s.stream("rej-1"))
}

// TestApplicationEventStartsTheWorkflowThatNamesIt registers, at run time, a
// workflow started by an application's own event on its own topic, with the
// task id in a nested field, and publishes such an event with kcat.
func TestApplicationEventStartsTheWorkflowThatNamesIt(t *testing.T) {
	requireTools(t, "kcat")
	shop := startShop(t)
	s := startSystem(t, engine.Config{})
	w, err := workflowfile.Parse("ship-on-order.yaml", []byte(`
name: ship-on-order
trigger:
  topics: [shop.events]
  type: OrderPlaced
  typeField: /type
  idField: /order/id
steps:
  - name: charge
    http: {url: "`+shop+`/charge"}
    compensation: {http: {url: "`+shop+`/refund", body: {paymentId: "{{result.paymentId}}"}}}
  - name: confirm
    http: {url: "`+shop+`/email"}
`))
	require.NoError(t, err)
	s.register(w)

	brokers := strings.Join(s.app.KafkaBrokers, ",")
	publish := func(key, body string) {
		cmd := exec.Command("kcat", "-P", "-b", brokers, "-t", "shop.events", "-k", key)
		cmd.Stdin = strings.NewReader(body + "\n")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	publish("A-17", `{"type":"OrderPlaced","order":{"id":"A-17","amount":3},"at":"2026-11-22T10:00:00Z"}`)
	task := s.awaitTerminal([]string{"A-17"}, 60*time.Second)["A-17"]
	require.Equal(t, domain.StateProcessed, task.State, task.Reason)
	assert.Equal(t, "ship-on-order", task.Workflow)
	assert.Equal(t, 1, shopStateOf(t, shop).Emails["A-17/confirm"])

	publish("A-18", `{"type":"OrderShipped","order":{"id":"A-18"}}`)
	dead := s.consumeTopic(protocol.DeadLetterTopic, 1, 30*time.Second)
	assert.Equal(t, "A-18", string(dead[0].Key))
	assert.Empty(t, s.stream("A-18"), "an event no workflow starts on is dead-lettered, not a task")
}

// TestSagactlWorkflows applies, validates, lists, shows and diffs
// definition files with sagactl, and submits orders with it.
func TestSagactlWorkflows(t *testing.T) {
	shop := startShop(t)
	s := startSystem(t, engine.Config{})
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/workflows/shop.yaml")
	require.NoError(t, err)
	file := dir + "/shop.yaml"
	require.NoError(t, os.WriteFile(file, bytes.ReplaceAll(data, []byte("SHOP"), []byte(shop)), 0o644))

	out, code := s.sagactl("workflows", "diff", file)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "workflow shop: new")
	out, code = s.sagactl("workflows", "validate", file)
	require.Equal(t, 0, code, out)
	out, code = s.sagactl("workflows", "apply", dir)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "workflow shop registered as version 1")
	out, code = s.sagactl("workflows", "apply", file)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "unchanged (version 1)")
	out, code = s.sagactl("workflows", "diff", file)
	assert.Equal(t, 0, code, out)

	changed := bytes.Replace(bytes.ReplaceAll(data, []byte("SHOP"), []byte(shop)), []byte("attempts: 3"), []byte("attempts: 4"), 1)
	require.NoError(t, os.WriteFile(file, changed, 0o644))
	out, code = s.sagactl("workflows", "diff", file)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "version 1 -> 2")
	assert.Contains(t, out, "+ ")

	out, code = s.sagactl("workflows", "list")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "shop")
	assert.Contains(t, out, "reserve, charge, ship, confirm")
	out, code = s.sagactl("workflows", "get", "shop", "--version", "1")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "# workflow shop version 1")
	assert.Contains(t, out, "{{result.paymentId}}")

	bad := dir + "/bad.yaml"
	require.NoError(t, os.WriteFile(bad, []byte("name: bad\nsteps:\n  - name: a\n    budget: -1s\n    agent: x\n  - name: a\n    agent: x\n"), 0o644))
	out, code = s.sagactl("workflows", "validate", bad)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "bad.yaml")
	assert.Contains(t, out, "line 4")
	assert.Contains(t, out, "steps[1].name")

	out, code = s.sagactl("submit", "ctl-1", `{"amount": 5}`, "--workflow", "shop", "--wait", "--timeout", "30s")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "processed")
	out, code = s.sagactl("submit", "ctl-2", "--workflow", "nope")
	assert.Equal(t, 5, code, out)
	assert.Contains(t, out, "rejected")
	assert.Contains(t, out, "unknown workflow")
}

// TestHTTPAgentAndShellAgentServeOneWorkflow runs a user's workflow whose
// first step is an HTTP call made by the built-in agent and whose second is
// carried out by the kcat shell agent.
func TestHTTPAgentAndShellAgentServeOneWorkflow(t *testing.T) {
	requireTools(t, "kcat", "jq", "bash")
	shop := startShop(t)
	s := startSystem(t, engine.Config{})
	w, err := workflowfile.Parse("mixed.yaml", []byte(`
name: mixed
steps:
  - name: reserve
    http: {url: "`+shop+`/reserve"}
  - name: ring-bell
    agent: bell
    budget: 20s
`))
	require.NoError(t, err)
	s.register(w)
	startShellAgent(t, s, "bell")
	s.publish("mixed-1", []byte(`{"orderId":"mixed-1","workflow":"mixed"}`))
	task := s.awaitTerminal([]string{"mixed-1"}, 60*time.Second)["mixed-1"]
	require.Equal(t, domain.StateProcessed, task.State, task.Reason)
	assert.Equal(t, "http", task.Step("reserve").Agent)
	assert.Equal(t, "bell", task.Step("ring-bell").Agent)
	assert.Contains(t, string(task.Step("reserve").Result), "reservationId")
	assert.NotEmpty(t, shopStateOf(t, shop).Reservations["mixed-1/reserve"])
}

// TestGoSDKAgentAndShellAgentServeOneWorkflow runs a workflow whose first
// step is served by an agent written with the Go SDK, in its own consumer,
// and whose second by the kcat shell agent; the shell agent's command
// carries the Go agent's result.
func TestGoSDKAgentAndShellAgentServeOneWorkflow(t *testing.T) {
	requireTools(t, "kcat", "jq", "bash")
	s := startSystem(t, engine.Config{})
	w := &domain.Workflow{Name: "duo", Steps: []domain.StepDefinition{
		{Name: "stamp", Agent: "stamper", Budget: 20 * time.Second, MaxAttempts: 2, Backoff: fastBackoff},
		{Name: "ring-bell", Agent: "bell", Budget: 20 * time.Second, MaxAttempts: 1, Backoff: fastBackoff},
	}}
	s.register(w)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(runCtx, agent.Config{Brokers: s.app.KafkaBrokers, Logger: testLogger()}, "stamper",
			func(ctx context.Context, req agent.Request) (any, error) {
				return map[string]string{"stamp": "ok-" + req.TaskID}, nil
			})
	}()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })
	startShellAgent(t, s, "bell")

	s.publish("duo-1", []byte(`{"orderId":"duo-1","workflow":"duo"}`))
	task := s.awaitTerminal([]string{"duo-1"}, 60*time.Second)["duo-1"]
	require.Equal(t, domain.StateProcessed, task.State, task.Reason)
	assert.JSONEq(t, `{"stamp":"ok-duo-1"}`, string(task.Step("stamp").Result))
}
