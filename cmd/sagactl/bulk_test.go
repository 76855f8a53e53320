package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestBulkRetryReportsEachFailure puts a proxy in front of the API that
// refuses the retry of one task: the others are retried, the refused one
// is reported with the API's answer, and sagactl exits 1.
func TestBulkRetryReportsEachFailure(t *testing.T) {
	s := refusingPayments(t, 0)
	s.intoError("r-1", "r-2")
	target, err := url.Parse(s.api)
	require.NoError(t, err)
	forward := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/api/tasks/r-2/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"event store away"}`))
			return
		}
		forward.ServeHTTP(w, r)
	}))
	defer proxy.Close()

	r1, _, err := s.app.Tasks.Get(context.Background(), "r-1")
	require.NoError(t, err)
	before := r1.Revision
	out, errOut, code := s.runAt(proxy.URL, "retry", "--state", "Error") // two are a handful: no --yes needed
	assert.Equal(t, 1, code, "one failed")
	assert.Regexp(t, `r-1\s+done`, out)
	assert.Regexp(t, `r-2\s+FAILED: 503 Service Unavailable: event store away`, out)
	assert.Contains(t, out, "retry: 1 of 2 done, 1 failed")
	assert.Contains(t, errOut, "retry failed for 1 of 2")
	require.Eventually(t, func() bool {
		task, _, err := s.app.Tasks.Get(context.Background(), "r-1")
		return err == nil && task.Revision > before
	}, 30*time.Second, 20*time.Millisecond, "r-1 was retried (and, the payment still refused, failed again)")
	task, _, err := s.app.Tasks.Get(context.Background(), "r-2")
	require.NoError(t, err)
	assert.Equal(t, domain.StateError, task.State, "r-2 was not retried")
}

// TestCancelByFilterAndOverdue hangs the shipping service and keeps the
// supervisor from scanning, so attempts at schedule-shipping stay in
// flight past their completeBy: overdue lists them oldest first; a bulk
// cancel at that step cancels them (and only them).
func TestCancelByFilterAndOverdue(t *testing.T) {
	s := startSaga(t, engine.Config{Workflows: testWorkflows(300 * time.Millisecond), SupervisorInterval: time.Hour,
		Faults: map[string][]demo.Fault{"shipping": {{Mode: demo.FaultHang, Rate: 1}}}})
	s.publish(protocol.OrdersTopic, order("h-1", `{"orderId":"h-1"}`))
	time.Sleep(50 * time.Millisecond)
	s.publish(protocol.OrdersTopic, order("h-2", `{"orderId":"h-2"}`), order("q-1", `{"orderId":"q-1","workflow":"quick"}`))
	s.awaitStates(map[string]domain.TaskState{"q-1": domain.StateProcessed})

	var late []overdueAttempt
	require.Eventually(t, func() bool {
		s.runJSON(&late, "overdue")
		return len(late) == 2
	}, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, "h-1", late[0].TaskID, "the oldest completeBy first")
	assert.Equal(t, "h-2", late[1].TaskID)
	for _, a := range late {
		assert.Equal(t, "schedule-shipping", a.Step)
		assert.Equal(t, protocol.ActionExecute, a.Action)
		assert.Equal(t, "shipping", a.Agent)
		assert.Positive(t, a.OverdueSeconds)
	}
	s.runJSON(&late, "overdue", "--at-least", "1h")
	assert.Empty(t, late)
	s.runJSON(&late, "overdue", "--step", "charge-payment")
	assert.Empty(t, late)
	out, _, code := s.run("overdue")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "2 attempts past their completeBy")

	var plan bulkReport
	s.runJSON(&plan, "cancel", "--step", "schedule-shipping", "--dry-run")
	assert.Equal(t, 2, plan.Matched)
	_, errOut, code := s.run("cancel", "--state", "Compensated", "--dry-run")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "cancel acts on tasks in Pending or Processing or Error")
	var done bulkReport
	s.runJSON(&done, "cancel", "--step", "schedule-shipping", "--reason", "shipping is down", "--yes")
	assert.Equal(t, 2, done.Succeeded)
	s.awaitStates(map[string]domain.TaskState{"h-1": domain.StateCompensating, "h-2": domain.StateCompensating, "q-1": domain.StateProcessed})
	task, _, err := s.app.Tasks.Get(context.Background(), "h-1")
	require.NoError(t, err)
	assert.Equal(t, "tester@sagactl", task.CancelledBy)
	assert.Contains(t, task.Reason, "shipping is down")
	s.runJSON(&plan, "cancel", "--step", "schedule-shipping", "--dry-run")
	assert.Zero(t, plan.Matched, "compensating tasks cannot be cancelled again")
}
