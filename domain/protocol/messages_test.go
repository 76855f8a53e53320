package protocol_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

func TestParseOrder(t *testing.T) {
	o, err := protocol.ParseOrder([]byte(` {"orderId":"o-1","items":[1,2]} `), 1024)
	require.NoError(t, err)
	assert.Equal(t, "o-1", o.ID)
	assert.Equal(t, "order", o.Workflow, "workflow defaults to order")
	assert.JSONEq(t, `{"orderId":"o-1","items":[1,2]}`, string(o.Body))

	for name, body := range map[string]string{
		"not json":                 `{"orderId":`,
		"not an object":            `["o-1"]`,
		"missing orderId":          `{"workflow":"order"}`,
		"orderId wrong type":       `{"orderId":true}`,
		"orderId with spaces":      `{"orderId":"a b"}`,
		"bad replyTo":              `{"orderId":"o-1","replyTo":"no/slashes"}`,
		"oversized":                `{"orderId":"o-1","pad":"` + string(make([]byte, 2048)) + `"}`,
		"empty":                    ``,
		"version without workflow": `{"orderId":"o-1","workflowVersion":2}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := protocol.ParseOrder([]byte(body), 1024)
			assert.ErrorIs(t, err, domain.ErrInvalidMessage)
		})
	}
}

func TestParseStepReply(t *testing.T) {
	r, err := protocol.ParseStepReply([]byte(`{"taskId":"o-1","step":"s","attempt":1,"outcome":"succeeded"}`))
	require.NoError(t, err)
	assert.Equal(t, protocol.ActionExecute, r.Action)
	for _, body := range []string{`{}`, `nope`, `{"taskId":"o-1","step":"s","attempt":0,"outcome":"succeeded"}`,
		`{"taskId":"o-1","step":"s","attempt":1,"outcome":"maybe"}`, `{"taskId":"o-1","step":"s","attempt":1,"outcome":"failed"}`,
		`{"taskId":1,"step":"s","attempt":1,"outcome":"succeeded"}`} {
		_, err := protocol.ParseStepReply([]byte(body))
		assert.ErrorIs(t, err, domain.ErrInvalidMessage, body)
	}
}

// TestAlertsRaisedAndResolved follows a task into Error and out of it
// twice: a retry, then a cancel. Each resolved alert resolves the raised
// alerts before it and none after, and an alert of an earlier sender (no
// kind) reads as raised.
func TestAlertsRaisedAndResolved(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	task := domain.NewTask("o-1")
	task.Apply(domain.TaskSubmitted{TaskID: "o-1", Workflow: "order", Steps: []string{"charge"}, SubmittedAt: at})
	task.Apply(domain.TaskFailed{TaskID: "o-1", Step: "charge", Reason: "card refused", At: at})
	first := protocol.RaisedAlert(task)
	assert.Equal(t, protocol.Alert{TaskID: "o-1", Workflow: "order", State: domain.StateError, Step: "charge", Reason: "card refused",
		Revision: 1, At: at, Kind: protocol.AlertRaised}, first)
	assert.Equal(t, protocol.AlertMessageType, first.MessageType())

	retried := domain.StepResubmitted{TaskID: "o-1", Step: "charge", By: "ann", At: at.Add(time.Minute)}
	task.Apply(retried)
	resolved := protocol.ResolvedAlert(task, "charge", retried, 2)
	assert.Equal(t, protocol.Alert{TaskID: "o-1", Workflow: "order", State: domain.StateProcessing, Step: "charge", Reason: "retried by ann",
		Revision: 2, At: at.Add(time.Minute), Kind: protocol.AlertResolved, By: "ann"}, resolved)
	assert.Equal(t, protocol.AlertResolvedMessageType, resolved.MessageType())
	assert.True(t, resolved.Resolves(first))
	assert.False(t, first.Resolves(resolved), "a raised alert resolves nothing")

	task.Apply(domain.TaskFailed{TaskID: "o-1", Step: "charge", Reason: "refused again", At: at})
	second := protocol.RaisedAlert(task)
	assert.False(t, resolved.Resolves(second), "a resolution does not resolve a later failure")
	cancelled := domain.TaskCancelled{TaskID: "o-1", By: "bob", Reason: "customer left", At: at}
	task.Apply(cancelled)
	again := protocol.ResolvedAlert(task, "charge", cancelled, 4)
	assert.Equal(t, "bob", again.By)
	assert.Equal(t, "cancelled by bob: customer left", again.Reason)
	assert.Equal(t, domain.StateCompensating, again.State)
	assert.True(t, again.Resolves(second))

	old, err := protocol.ParseAlert([]byte(`{"taskId":"o-1","workflow":"order","state":"Error","reason":"r","revision":9,"at":"2026-11-21T10:00:00Z"}`))
	require.NoError(t, err)
	assert.Equal(t, protocol.AlertRaised, old.Kind)
	future, err := protocol.ParseAlert([]byte(`{"taskId":"o-1","kind":"acknowledged","revision":9}`))
	require.NoError(t, err, "a kind from a later version is kept for the caller to pass over")
	assert.Equal(t, "acknowledged", future.Kind)
	for _, bad := range []string{``, `[]`, `{"workflow":"order"}`, "\x00\xff"} {
		_, err := protocol.ParseAlert([]byte(bad))
		assert.ErrorIs(t, err, domain.ErrInvalidMessage, "%q", bad)
	}
}
