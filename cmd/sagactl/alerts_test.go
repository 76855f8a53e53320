package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestAlertsAndBulkRetry drives seven orders into Error (the payment
// service refuses every charge), lists their open alerts, lists them again
// with a dry run of a bulk retry that changes nothing, is refused without
// --yes, then fixes the service and retries them all: they are processed,
// and every alert shows as resolved by the operator, from the resolved
// alerts on saga.alerts.
func TestAlertsAndBulkRetry(t *testing.T) {
	s := refusingPayments(t, 0)
	s.publish(protocol.OrdersTopic, order("fine-1", `{"orderId":"fine-1","workflow":"quick"}`))
	ids := []string{"e-1", "e-2", "e-3", "e-4", "e-5", "e-6", "e-7"}
	s.intoError(ids...)
	s.awaitStates(map[string]domain.TaskState{"fine-1": domain.StateProcessed})

	var rows []alertRow
	require.Eventually(t, func() bool {
		s.runJSON(&rows, "alerts", "--no-view")
		return len(rows) == 7
	}, 30*time.Second, 100*time.Millisecond, "the supervisor raises an alert for each")
	for _, r := range rows {
		assert.Equal(t, alertOpen, r.Status, r.TaskID)
		assert.Equal(t, "charge-payment", r.Step)
		assert.Contains(t, r.Reason, "charge-payment")
	}
	out, _, code := s.run("alerts", "--open")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "7 open, 0 resolved")

	var plan bulkReport
	s.runJSON(&plan, "retry", "--state", "Error", "--dry-run")
	assert.True(t, plan.DryRun)
	assert.Equal(t, 7, plan.Matched)
	assert.Empty(t, plan.Outcomes)
	out, _, code = s.run("retry", "--state", "Error", "--step", "charge-payment", "--workflow", "strict", "--dry-run")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "would retry 7 tasks (dry run)")
	assert.Contains(t, out, "e-7")
	assert.NotContains(t, out, "fine-1")
	s.runJSON(&plan, "retry", "--state", "Error", "--step", "reserve-inventory", "--dry-run")
	assert.Zero(t, plan.Matched, "none failed at reserve-inventory")

	_, errOut, code := s.run("retry", "--state", "Error")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "would act on 7; pass --yes")
	for _, hostile := range [][]string{
		{"retry", "--stat", "Error", "--yes"},                 // a misspelt filter
		{"retry", "--state", "Processed", "--yes"},            // not a state retry acts on
		{"retry", "e-1", "--state", "Error"},                  // an id and filters
		{"retry", "--yes"},                                    // no filter at all
		{"retry", "--state", "Error", "--since", "yesterday"}, // not a time
	} {
		_, errOut, code := s.run(hostile...)
		assert.NotEqual(t, 0, code, "%v: %s", hostile, errOut)
	}
	for _, id := range ids {
		task, _, err := s.app.Tasks.Get(context.Background(), id)
		require.NoError(t, err)
		assert.Equal(t, domain.StateError, task.State, "%s: nothing was retried yet", id)
	}

	s.app.Services["payment"].SetFaults()
	var done bulkReport
	s.runJSON(&done, "retry", "--state", "Error", "--yes")
	assert.Equal(t, 7, done.Matched)
	assert.Equal(t, 7, done.Succeeded)
	assert.Zero(t, done.Failed)
	processed := map[string]domain.TaskState{}
	for _, id := range ids {
		processed[id] = domain.StateProcessed
	}
	s.awaitStates(processed)

	require.Eventually(t, func() bool {
		s.runJSON(&rows, "alerts", "--no-view")
		for _, r := range rows {
			if r.Status != alertResolved {
				return false
			}
		}
		return len(rows) == 7
	}, 30*time.Second, 100*time.Millisecond, "the status publisher resolves each alert")
	for _, r := range rows {
		require.NotNil(t, r.Resolution, r.TaskID)
		assert.Equal(t, "tester@sagactl", r.Resolution.By, r.TaskID)
		assert.Equal(t, r.Revision+1, r.Resolution.Revision, "%s: resolved by the event after the failure", r.TaskID)
		assert.Equal(t, domain.StateProcessing, r.Resolution.State, r.TaskID)
		assert.Empty(t, r.Note, "from the topic, not the view")
	}
	out, _, code = s.run("alerts", "--open")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "0 open, 0 resolved")
	_, errOut, code = s.run("retry", "--state", "Error", "--yes")
	assert.Equal(t, 0, code)
	assert.Contains(t, errOut, "no task matches")
}

// TestAlertsCompletedByTheTaskView checks alerts against the task view: a
// task in Error whose alert is not on saga.alerts (here: the supervisor
// never scans) is listed as open from the view, and once an operator
// retries it, it leaves the list of open alerts.
func TestAlertsCompletedByTheTaskView(t *testing.T) {
	s := refusingPayments(t, time.Hour)
	s.intoError("v-1")
	var rows []alertRow
	s.runJSON(&rows, "alerts")
	require.Len(t, rows, 1)
	assert.Equal(t, alertOpen, rows[0].Status)
	assert.Equal(t, noteNoAlert, rows[0].Note)
	s.runJSON(&rows, "alerts", "--no-view")
	assert.Empty(t, rows)

	s.app.Services["payment"].SetFaults()
	out, errOut, code := s.run("retry", "v-1")
	require.Equal(t, 0, code, out+errOut)
	s.awaitStates(map[string]domain.TaskState{"v-1": domain.StateProcessed})
	s.runJSON(&rows, "alerts", "--open")
	assert.Empty(t, rows)
}
