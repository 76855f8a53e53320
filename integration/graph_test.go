package integration_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
)

// graphService is the services of a graph workflow's HTTP steps: it
// records when each call began and ended, and the bodies it was sent.
// storage and email wait (up to a bound) until the other has begun, so
// that they overlap only when they are called side by side.
type graphService struct {
	mu     sync.Mutex
	calls  map[string]graphCall // by path
	begun  map[string]chan struct{}
	bodies map[string]string
}

type graphCall struct{ from, to time.Time }

func startGraphService(t *testing.T) (*graphService, string) {
	g := &graphService{calls: map[string]graphCall{}, begun: map[string]chan struct{}{}, bodies: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(srv.Close)
	return g, srv.URL
}

// began returns the channel closed once path was called.
func (g *graphService) began(path string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.begun[path]
	if !ok {
		c = make(chan struct{})
		g.begun[path] = c
	}
	return c
}

func (g *graphService) serve(w http.ResponseWriter, r *http.Request) {
	from := time.Now()
	body, _ := io.ReadAll(r.Body)
	close(g.began(r.URL.Path))
	// /storage/ID waits for /email/ID and the other way round.
	kind, id, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	other := map[string]string{"storage": "/email/", "email": "/storage/"}[kind]
	if other != "" {
		select {
		case <-g.began(other + id):
		case <-time.After(3 * time.Second):
		}
		time.Sleep(20 * time.Millisecond) // so that the calls overlap by more than a clock's tick
	}
	g.mu.Lock()
	g.calls[r.URL.Path] = graphCall{from: from, to: time.Now()}
	g.bodies[r.URL.Path] = string(body)
	g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case kind == "email" && strings.HasPrefix(id, "fail"):
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"no such mailbox"}`))
	case kind == "storage":
		_, _ = w.Write([]byte(`{"bucket":"bucket-` + id + `"}`))
	default:
		_, _ = w.Write([]byte(`{"id":"` + kind + `-` + id + `"}`))
	}
}

func (g *graphService) call(path string) (graphCall, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.calls[path]
	return c, ok
}

func (g *graphService) body(path string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.bodies[path]
}

// graphDefinition is a workflow of the shape: account, then
// storage and email side by side, ship after both; newsletter, beside
// them, only for orders that ask for it.
const graphDefinition = `
name: graph
defaults: {budget: 10s, attempts: 1}
steps:
  - name: account
    http: {url: "SVC/account/{{order.orderId}}"}
    compensation: {http: {url: "SVC/account-undo/{{order.orderId}}", body: {id: "{{result.id}}"}}}
  - name: storage
    after: [account]
    http: {url: "SVC/storage/{{order.orderId}}", body: {account: "{{results.account.id}}"}}
    compensation: {http: {url: "SVC/storage-undo/{{order.orderId}}", body: {bucket: "{{result.bucket}}"}}}
  - name: email
    after: [account]
    http: {url: "SVC/email/{{order.orderId}}"}
  - name: ship
    after: [storage, email]
    http: {url: "SVC/ship/{{order.orderId}}"}
    compensation: {http: {url: "SVC/ship-undo/{{order.orderId}}"}}
  - name: newsletter
    after: [account]
    when: "order.marketing == true"
    http: {url: "SVC/newsletter/{{order.orderId}}"}
    compensation: {http: {url: "SVC/newsletter-undo/{{order.orderId}}"}}
`

// TestGraphBranchesRunSideBySideThroughTheHTTPAgent (issue 26, items 1 and
// 2): through the built-in HTTP agent and Kafka alone, two branches'
// calls overlap at the service, the join runs after both, a failure in one
// branch undoes the other's completed step with its own result, and a step
// whose condition is false is never called nor compensated.
func TestGraphBranchesRunSideBySideThroughTheHTTPAgent(t *testing.T) {
	svc, url := startGraphService(t)
	s := startSystem(t, engine.Config{})
	wf := hostileWorkflow(t, strings.ReplaceAll(graphDefinition, "SVC", url))
	require.Equal(t, 1, s.register(wf))

	s.publish("ok-1", []byte(`{"orderId":"ok-1","workflow":"graph","marketing":false}`))
	s.publish("fail-1", []byte(`{"orderId":"fail-1","workflow":"graph"}`))
	tasks := s.awaitTerminal([]string{"ok-1", "fail-1"}, 60*time.Second)

	ok := tasks["ok-1"]
	require.Equal(t, domain.StateProcessed, ok.State, ok.Reason)
	storage, _ := svc.call("/storage/ok-1")
	email, _ := svc.call("/email/ok-1")
	ship, shipped := svc.call("/ship/ok-1")
	require.True(t, shipped)
	assert.True(t, storage.from.Before(email.to) && email.from.Before(storage.to),
		"the branches overlap at the service: storage %v–%v, email %v–%v", storage.from, storage.to, email.from, email.to)
	assert.False(t, ship.from.Before(storage.to) || ship.from.Before(email.to), "the join runs after both branches")
	assert.JSONEq(t, `{"account":"account-ok-1"}`, svc.body("/storage/ok-1"), "a branch reads the result of the step it waits for")
	assert.Equal(t, domain.StepStateSkipped, ok.Step("newsletter").State)
	assert.Equal(t, domain.StepStateProcessed, ok.Step("ship").State)

	failed := tasks["fail-1"]
	require.Equal(t, domain.StateCompensated, failed.State, failed.Reason)
	assert.Equal(t, "email", failed.FailedStep, "the compensated task names the step that failed")
	assert.JSONEq(t, `{"bucket":"bucket-fail-1"}`, svc.body("/storage-undo/fail-1"), "the completed branch is undone with its own result")
	assert.JSONEq(t, `{"id":"account-fail-1"}`, svc.body("/account-undo/fail-1"))
	_, shipCalled := svc.call("/ship/fail-1")
	assert.False(t, shipCalled, "the join never ran")
	storageUndo, _ := svc.call("/storage-undo/fail-1")
	accountUndo, _ := svc.call("/account-undo/fail-1")
	assert.True(t, storageUndo.to.Before(accountUndo.from) || storageUndo.to.Equal(accountUndo.from), "undone one at a time, the later first")
	for _, id := range []string{"ok-1", "fail-1"} {
		checkStream(t, id, s.stream(id))
		checkGraph(t, id, wf, s.stream(id))
		for _, path := range []string{"/newsletter/", "/newsletter-undo/"} {
			_, called := svc.call(path + id)
			assert.False(t, called, "%s%s was called", path, id)
		}
		assert.Contains(t, types(s.stream(id)), domain.StepSkippedType)
	}

	// The task view says the same.
	s.awaitView("fail-1", domain.StateCompensated)
	view, found, err := s.app.Tasks.Get(context.Background(), "ok-1")
	require.NoError(t, err)
	require.True(t, found)
	states := map[string]domain.StepState{}
	for _, st := range view.Steps {
		states[st.Name] = st.State
	}
	assert.Equal(t, map[string]domain.StepState{"account": "Processed", "storage": "Processed", "email": "Processed", "ship": "Processed",
		"newsletter": "Skipped"}, states)
	events := s.stream("ok-1")
	last, err := events[len(events)-1].Decode()
	require.NoError(t, err)
	raw, err := json.Marshal(last)
	require.NoError(t, err)
	var at struct{ At time.Time }
	require.NoError(t, json.Unmarshal(raw, &at))
	assert.True(t, view.UpdatedAt.Equal(at.At), "updatedAt %v is the time of the last event %v", view.UpdatedAt, at.At)
	view, _, err = s.app.Tasks.Get(context.Background(), "fail-1")
	require.NoError(t, err)
	assert.Equal(t, "email", view.FailedStep)
}

// TestGraphBranchesThatHangBothTimeOut: two branches in flight at once to
// a service that never answers both time out through the supervisor, each
// at its own deadline; both are in doubt, so both are undone.
func TestGraphBranchesThatHangBothTimeOut(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	undone := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/undo/") {
			mu.Lock()
			undone[strings.TrimPrefix(r.URL.Path, "/undo/")] = true
			mu.Unlock()
			return
		}
		select { // hang until the test ends
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	s := startSystem(t, engine.Config{})
	wf := hostileWorkflow(t, strings.ReplaceAll(`
name: hang
defaults: {budget: 300ms, attempts: 1}
steps:
  - {name: left, after: [], http: {url: "SVC/left"}, compensation: {http: {url: "SVC/undo/left"}, budget: 5s}}
  - {name: right, after: [], http: {url: "SVC/right"}, compensation: {http: {url: "SVC/undo/right"}, budget: 5s}}
`, "SVC", srv.URL))
	s.register(wf)
	s.publish("hang-1", []byte(`{"orderId":"hang-1","workflow":"hang"}`))
	task := s.awaitTerminal([]string{"hang-1"}, 60*time.Second)["hang-1"]
	require.Equal(t, domain.StateCompensated, task.State, task.Reason)
	timedOut := 0
	for _, e := range s.stream("hang-1") {
		if e.Type == domain.StepTimedOutType {
			timedOut++
		}
	}
	assert.Equal(t, 2, timedOut, "each branch timed out at its own deadline")
	checkStream(t, "hang-1", s.stream("hang-1"))
	checkGraph(t, "hang-1", wf, s.stream("hang-1"))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, map[string]bool{"left": true, "right": true}, undone, "both branches were in doubt and undone")
}
