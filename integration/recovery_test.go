package integration_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

func faults(agent string, f ...demo.Fault) map[string][]demo.Fault {
	return map[string][]demo.Fault{agent: f}
}

func stepsOf(events []domain.RecordedEvent) []string {
	var out []string
	for _, e := range events {
		var body struct{ Step string }
		_ = json.Unmarshal(e.Data, &body)
		out = append(out, e.Type+" "+body.Step)
	}
	return out
}

func TestHungAgentTimesOutRetriesThenCompensatesInReverseOrder(t *testing.T) {
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{fastWorkflow(300 * time.Millisecond)},
		Faults: faults("shipping", demo.Fault{Mode: demo.FaultHang, Rate: 1})})
	s.publish("hung-1", []byte(`{"orderId":"hung-1"}`))
	task := s.awaitTerminal([]string{"hung-1"}, 30*time.Second)["hung-1"]
	require.Equal(t, domain.StateCompensated, task.State, task.Reason)
	events := s.stream("hung-1")
	assert.Equal(t, []string{
		"TaskSubmitted ",
		"StepDispatched reserve-inventory", "StepSucceeded reserve-inventory",
		"StepDispatched charge-payment", "StepSucceeded charge-payment",
		"StepDispatched schedule-shipping", "StepTimedOut schedule-shipping", "StepRetryScheduled schedule-shipping",
		"StepDispatched schedule-shipping", "StepTimedOut schedule-shipping", "StepRetryScheduled schedule-shipping",
		"StepDispatched schedule-shipping", "StepTimedOut schedule-shipping", "CompensationRequested schedule-shipping",
		"CompensationDispatched schedule-shipping", "StepCompensated schedule-shipping",
		"CompensationDispatched charge-payment", "StepCompensated charge-payment",
		"CompensationDispatched reserve-inventory", "StepCompensated reserve-inventory",
		"TaskCompensated ",
	}, stepsOf(events))
	checkStream(t, "hung-1", events)
	ship := task.Step("schedule-shipping")
	assert.Equal(t, 3, ship.FailureCount)
	assert.Equal(t, domain.FailureTimeout, ship.LastFailure)
	assert.Equal(t, domain.StepStateCompensated, ship.State)
	for _, e := range events {
		if e.Type == domain.StepTimedOutType {
			assert.Contains(t, e.Metadata.Actor, "supervisor/", "the supervisor records timeouts")
		}
		if e.Type == domain.StepDispatchedType || e.Type == domain.CompensationDispatchedType {
			assert.Contains(t, e.Metadata.Actor, "scheduler/", "only the scheduler dispatches")
		}
	}

	// The API shows each attempt's failure count and the compensations.
	s.awaitView("hung-1", domain.StateCompensated)
	resp, err := http.Get("http://" + s.app.HTTPAddr + "/api/tasks/hung-1")
	require.NoError(t, err)
	defer resp.Body.Close()
	var view struct {
		State string
		Steps []struct {
			Name, State  string
			Attempt      int
			FailureCount int
			Compensation *struct {
				State   string
				Attempt int
			}
		}
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&view))
	assert.Equal(t, "Compensated", view.State)
	require.Len(t, view.Steps, 3)
	assert.Equal(t, 3, view.Steps[2].Attempt)
	assert.Equal(t, 3, view.Steps[2].FailureCount)
	for _, st := range view.Steps {
		assert.Equal(t, "Compensated", st.State, st.Name)
		require.NotNil(t, st.Compensation, st.Name)
		assert.Equal(t, "Processed", st.Compensation.State)
	}
}

func TestPermanentFailureCompensatesAtOnce(t *testing.T) {
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{fastWorkflow(time.Second)},
		Faults: faults("payment", demo.Fault{Mode: demo.FaultPermanent, Rate: 1})})
	s.publish("perm-1", []byte(`{"orderId":"perm-1"}`))
	task := s.awaitTerminal([]string{"perm-1"}, 30*time.Second)["perm-1"]
	assert.Equal(t, domain.StateCompensated, task.State)
	assert.Contains(t, task.Reason, "failed permanently")
	assert.Equal(t, []string{
		"TaskSubmitted ",
		"StepDispatched reserve-inventory", "StepSucceeded reserve-inventory",
		"StepDispatched charge-payment", "StepFailed charge-payment", "CompensationRequested charge-payment",
		"CompensationDispatched reserve-inventory", "StepCompensated reserve-inventory",
		"TaskCompensated ",
	}, stepsOf(s.stream("perm-1")), "no retry; the refused payment needs no undo")
}

var (
	sagactlOnce sync.Once
	sagactlPath string
	sagactlErr  error
)

// sagactl builds the command-line client once per test run.
func sagactl(t *testing.T) string {
	sagactlOnce.Do(func() {
		dir, err := filepath.Abs(filepath.Join("..", "tmp-test-bin"))
		if err == nil {
			sagactlPath = filepath.Join(dir, "sagactl")
			out, buildErr := exec.Command("go", "build", "-o", sagactlPath, "../cmd/sagactl").CombinedOutput()
			if buildErr != nil {
				sagactlErr = buildErr
				t.Log(string(out))
			}
		}
		sagactlErr = err
	})
	require.NoError(t, sagactlErr)
	return sagactlPath
}

func TestCompensationThatKeepsFailingEndsInErrorThenRetryResumes(t *testing.T) {
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{fastWorkflow(500 * time.Millisecond)},
		Faults: map[string][]demo.Fault{
			"payment":   {{Mode: demo.FaultPermanent, Rate: 1}},
			"inventory": {{Mode: demo.FaultTransient, Rate: 1, Compensation: true}},
		}})
	s.publish("stuck-1", []byte(`{"orderId":"stuck-1"}`))
	task := s.awaitTerminal([]string{"stuck-1"}, 60*time.Second)["stuck-1"]
	require.Equal(t, domain.StateError, task.State)
	assert.Contains(t, task.Reason, "compensation of step reserve-inventory failed")
	inv := task.Step("reserve-inventory")
	assert.Equal(t, domain.StepStateError, inv.State)
	assert.Equal(t, 5, inv.Compensation.FailureCount)

	alerts := s.consumeTopic(protocol.AlertsTopic, 1, 30*time.Second)
	var alert protocol.Alert
	require.NoError(t, json.Unmarshal(alerts[0].Value, &alert))
	assert.Equal(t, "stuck-1", alert.TaskID)
	assert.Equal(t, domain.StateError, alert.State)
	assert.Equal(t, "reserve-inventory", alert.Step)
	assert.Equal(t, task.Revision, alert.Revision)

	// The operator fixes the service and retries once calls go through
	// again: with this test's fast backoff, a retry while the agent's
	// breaker is still open would use all five attempts within its 2 s.
	s.app.Services["inventory"].SetFaults()
	require.Eventually(t, func() bool { return !s.app.HTTPHandlers["inventory"].AnyBreakerOpen() }, 10*time.Second, 10*time.Millisecond)
	out, err := exec.Command(sagactl(t), "retry", "--api", "http://"+s.app.HTTPAddr, "--by", "alice", "stuck-1").CombinedOutput()
	require.NoError(t, err, string(out))
	task = s.awaitTasks([]string{"stuck-1"}, 30*time.Second, func(t *domain.Task) bool { return t.State == domain.StateCompensated })["stuck-1"]
	assert.Equal(t, domain.StepStateCompensated, task.Step("reserve-inventory").State)
	events := s.stream("stuck-1")
	checkStream(t, "stuck-1", events)
	var resubmitted bool
	for _, e := range events {
		if e.Type == domain.StepResubmittedType {
			resubmitted = true
			assert.Equal(t, "operator/alice", e.Metadata.Actor)
		}
	}
	assert.True(t, resubmitted)

	out, err = exec.Command(sagactl(t), "retry", "--api", "http://"+s.app.HTTPAddr, "stuck-1").CombinedOutput()
	assert.Error(t, err, "a compensated task cannot be retried")
	assert.Contains(t, string(out), "only a task in Error can be retried")
}

func TestLateReplyAfterTimeoutChangesNothing(t *testing.T) {
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{fastWorkflow(300 * time.Millisecond)},
		Faults: faults("payment", demo.Fault{Mode: demo.FaultHang, Rate: 1})})
	s.publish("late-1", []byte(`{"orderId":"late-1"}`))
	s.awaitTasks([]string{"late-1"}, 30*time.Second, func(t *domain.Task) bool {
		return t.Step("charge-payment").FailureCount >= 1
	})
	before := s.app.Scheduler.Stats().StaleReplies
	late, _ := json.Marshal(protocol.StepReply{TaskID: "late-1", Step: "charge-payment", Action: protocol.ActionExecute, Attempt: 1, Outcome: protocol.OutcomeSucceeded})
	require.NoError(t, s.producer().ProduceSync(ctx(t, 10*time.Second), &kgo.Record{Topic: protocol.RepliesTopic, Key: []byte("late-1"), Value: late}).FirstErr())
	require.Eventually(t, func() bool { return s.app.Scheduler.Stats().StaleReplies > before }, 10*time.Second, 10*time.Millisecond,
		"the late reply is counted as stale")
	task := s.awaitTerminal([]string{"late-1"}, 30*time.Second)["late-1"]
	assert.Equal(t, domain.StateCompensated, task.State)
	for _, e := range s.stream("late-1") {
		if e.Type == domain.StepSucceededType {
			var body struct{ Step string }
			_ = json.Unmarshal(e.Data, &body)
			assert.NotEqual(t, "charge-payment", body.Step, "the late reply was not recorded")
		}
	}
}

func TestOperatorCancelCompensates(t *testing.T) {
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{fastWorkflow(2 * time.Second)},
		Faults: faults("shipping", demo.Fault{Mode: demo.FaultHang, Rate: 1})})
	s.publish("cancel-1", []byte(`{"orderId":"cancel-1"}`))
	s.awaitTasks([]string{"cancel-1"}, 30*time.Second, func(t *domain.Task) bool {
		return t.Step("schedule-shipping").State == domain.StepStateProcessing
	})
	// Shipping hangs until its complete-by; the cancellation waits for it.
	body, _ := json.Marshal(map[string]string{"by": "bob", "reason": "customer asked"})
	resp, err := http.Post("http://"+s.app.HTTPAddr+"/api/tasks/cancel-1/cancel", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	task := s.awaitTerminal([]string{"cancel-1"}, 60*time.Second)["cancel-1"]
	assert.Equal(t, domain.StateCompensated, task.State)
	assert.Equal(t, "bob", task.CancelledBy)
	checkStream(t, "cancel-1", s.stream("cancel-1"))

	resp, err = http.Post("http://"+s.app.HTTPAddr+"/api/tasks/cancel-1/cancel", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusConflict, resp.StatusCode, "a compensated task cannot be cancelled")
	resp, err = http.Post("http://"+s.app.HTTPAddr+"/api/tasks/nope/retry", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}
