package protocol_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestMessagesKeepTheirJSON pins the bytes of every message body saga
// produces, every field set: the expected texts were made by the build
// before the messages moved out of domain, and docs/protocol.md is their
// contract. A change here breaks callers and agents in other languages.
func TestMessagesKeepTheirJSON(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 5, time.UTC)
	cmd := protocol.ExecuteStep{TaskID: "o-1", Workflow: "order", Step: "charge", Agent: "payment", Action: protocol.ActionCompensate, Compensation: "refund",
		Attempt: 2, CompleteBy: at, IdempotencyKey: "o-1/charge/compensation", WorkflowVersion: 3, Order: json.RawMessage(`{"orderId":"o-1"}`),
		Results: map[string]json.RawMessage{"reserve": json.RawMessage(`{"r":1}`)}, Result: json.RawMessage(`{"p":2}`),
		HTTP: &domain.HTTPCall{URL: "http://s/x", Method: "POST", Body: json.RawMessage(`{"a":"{{order.orderId}}"}`)}, TraceParent: "tp"}
	reply := protocol.StepReply{TaskID: "o-1", Step: "charge", Action: protocol.ActionExecute, Attempt: 1, Outcome: protocol.OutcomeFailed,
		Failure: domain.FailureTransient, Reason: "busy", Agent: "payment", Result: json.RawMessage(`{}`), TraceParent: "tp"}
	status := protocol.TaskStatus{OrderID: "o-1", Status: protocol.StatusStepSucceeded, State: domain.StateProcessing, Step: "charge", Attempt: 1,
		Reason: "r", Workflow: "order", WorkflowVersion: 2, Result: json.RawMessage(`{"p":2}`), Revision: 7, Time: at, ReplyTo: "reply.x", TraceParent: "tp"}
	alert := protocol.Alert{TaskID: "o-1", Workflow: "order", State: domain.StateError, Step: "charge", Reason: "r", Revision: 9, At: at}
	resolved := protocol.Alert{TaskID: "o-1", Workflow: "order", State: domain.StateProcessing, Step: "charge", Reason: "retried by ann",
		Revision: 10, At: at, Kind: protocol.AlertResolved, By: "ann"}
	for _, c := range []struct {
		message any
		want    string
	}{
		{cmd, `{"taskId":"o-1","workflow":"order","step":"charge","agent":"payment","action":"compensate","compensation":"refund","attempt":2,"completeBy":"2026-11-21T10:00:00.000000005Z","idempotencyKey":"o-1/charge/compensation","workflowVersion":3,"order":{"orderId":"o-1"},"results":{"reserve":{"r":1}},"result":{"p":2},"http":{"method":"POST","url":"http://s/x","body":{"a":"{{order.orderId}}"}}}`},
		{reply, `{"taskId":"o-1","step":"charge","action":"execute","attempt":1,"outcome":"failed","failure":"transient","reason":"busy","agent":"payment","result":{}}`},
		{status, `{"orderId":"o-1","status":"step-succeeded","state":"Processing","step":"charge","attempt":1,"reason":"r","workflow":"order","workflowVersion":2,"result":{"p":2},"revision":7,"time":"2026-11-21T10:00:00.000000005Z"}`},
		{alert, `{"taskId":"o-1","workflow":"order","state":"Error","step":"charge","reason":"r","revision":9,"at":"2026-11-21T10:00:00.000000005Z"}`},
		{resolved, `{"taskId":"o-1","workflow":"order","state":"Processing","step":"charge","reason":"retried by ann","revision":10,"at":"2026-11-21T10:00:00.000000005Z","kind":"resolved","by":"ann"}`},
	} {
		got, err := json.Marshal(c.message)
		require.NoError(t, err)
		assert.Equal(t, c.want, string(got), "%T", c.message)
	}
}
