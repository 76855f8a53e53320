package domain_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

var (
	t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	wf = domain.OrderWorkflow()
	d  = domain.Decision{Now: t0, Actor: "scheduler-1"}
)

func submitted() domain.TaskSubmitted {
	return domain.TaskSubmitted{TaskID: "o-1", Workflow: "order", Steps: wf.StepNames(), Order: json.RawMessage(`{"orderId":"o-1"}`), SubmittedAt: t0}
}

func dispatched(step, agent string, attempt int) domain.StepDispatched {
	return domain.StepDispatched{TaskID: "o-1", Step: step, Agent: agent, Attempt: attempt, CompleteBy: t0.Add(5 * time.Second),
		LockedBy: "scheduler-1", IdempotencyKey: "o-1/" + step, DispatchedAt: t0}
}

func succeeded(step string, attempt int) domain.StepSucceeded {
	return domain.StepSucceeded{TaskID: "o-1", Step: step, Attempt: attempt, At: t0}
}

func failed(step string, attempt int, kind domain.FailureKind) domain.StepFailed {
	return domain.StepFailed{TaskID: "o-1", Step: step, Attempt: attempt, Failure: kind, Reason: "boom", At: t0}
}

func reply(step string, attempt int, outcome string, kind domain.FailureKind) domain.StepReply {
	return domain.StepReply{TaskID: "o-1", Step: step, Attempt: attempt, Outcome: outcome, Failure: kind, Reason: "boom"}
}

func TestNext(t *testing.T) {
	cases := []struct {
		name  string
		given []domain.Event
		then  []domain.Event
	}{
		{"nothing before submission", nil, nil},
		{"submission dispatches the first step", []domain.Event{submitted()},
			[]domain.Event{dispatched("reserve-inventory", "inventory", 1)}},
		{"nothing while a step is in flight", []domain.Event{submitted(), dispatched("reserve-inventory", "inventory", 1)}, nil},
		{"success dispatches the next step", []domain.Event{submitted(), dispatched("reserve-inventory", "inventory", 1), succeeded("reserve-inventory", 1)},
			[]domain.Event{dispatched("charge-payment", "payment", 1)}},
		{"transient failure retries with the next attempt", []domain.Event{submitted(), dispatched("reserve-inventory", "inventory", 1), failed("reserve-inventory", 1, domain.FailureTransient)},
			[]domain.Event{dispatched("reserve-inventory", "inventory", 2)}},
		{"attempts exhausted fails the task", []domain.Event{submitted(),
			dispatched("reserve-inventory", "inventory", 3), failed("reserve-inventory", 3, domain.FailureTransient)},
			[]domain.Event{domain.TaskFailed{TaskID: "o-1", Step: "reserve-inventory", Reason: "step reserve-inventory failed after 3 of 3 attempts: boom", At: t0}}},
		{"permanent failure fails the task at once", []domain.Event{submitted(), dispatched("reserve-inventory", "inventory", 1), failed("reserve-inventory", 1, domain.FailurePermanent)},
			[]domain.Event{domain.TaskFailed{TaskID: "o-1", Step: "reserve-inventory", Reason: "step reserve-inventory failed permanently: boom", At: t0}}},
		{"all steps done processes the task", []domain.Event{submitted(),
			dispatched("reserve-inventory", "inventory", 1), succeeded("reserve-inventory", 1),
			dispatched("charge-payment", "payment", 1), succeeded("charge-payment", 1),
			dispatched("schedule-shipping", "shipping", 1), succeeded("schedule-shipping", 1)},
			[]domain.Event{domain.TaskProcessed{TaskID: "o-1", At: t0}}},
		{"nothing after a terminal state", []domain.Event{submitted(), domain.TaskFailed{TaskID: "o-1", Reason: "x", At: t0}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := domain.Fold("o-1", tc.given)
			assert.Equal(t, tc.then, task.Next(wf, d))
		})
	}
}

func TestRecordReply(t *testing.T) {
	inFlight := []domain.Event{submitted(), dispatched("reserve-inventory", "inventory", 2)}
	cases := []struct {
		name    string
		given   []domain.Event
		reply   domain.StepReply
		then    []domain.Event
		wantErr error
	}{
		{"success records and moves on", inFlight, reply("reserve-inventory", 2, domain.OutcomeSucceeded, ""),
			[]domain.Event{succeeded("reserve-inventory", 2), dispatched("charge-payment", "payment", 1)}, nil},
		{"transient failure records and retries", inFlight, reply("reserve-inventory", 2, domain.OutcomeFailed, domain.FailureTransient),
			[]domain.Event{failed("reserve-inventory", 2, domain.FailureTransient), dispatched("reserve-inventory", "inventory", 3)}, nil},
		{"stale attempt is ignored", inFlight, reply("reserve-inventory", 1, domain.OutcomeSucceeded, ""), nil, domain.ErrStaleReply},
		{"reply for a step not in flight is stale", inFlight, reply("charge-payment", 1, domain.OutcomeSucceeded, ""), nil, domain.ErrStaleReply},
		{"made-up step is rejected", inFlight, reply("teleport", 1, domain.OutcomeSucceeded, ""), nil, domain.ErrUnknownStep},
		{"unknown task is rejected", nil, reply("reserve-inventory", 1, domain.OutcomeSucceeded, ""), nil, domain.ErrTaskNotFound},
		{"duplicate reply after success is stale", append(inFlight, succeeded("reserve-inventory", 2)), reply("reserve-inventory", 2, domain.OutcomeSucceeded, ""), nil, domain.ErrStaleReply},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task := domain.Fold("o-1", tc.given)
			got, err := task.RecordReply(wf, tc.reply, d)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.then, got)
		})
	}
}

func TestFoldTracksStepState(t *testing.T) {
	task := domain.Fold("o-1", []domain.Event{submitted(), dispatched("reserve-inventory", "inventory", 1), failed("reserve-inventory", 1, domain.FailureTransient), dispatched("reserve-inventory", "inventory", 2)})
	s := task.Step("reserve-inventory")
	assert.Equal(t, domain.StateProcessing, task.State)
	assert.Equal(t, domain.StepProcessing, s.State)
	assert.Equal(t, 2, s.Attempt)
	assert.Equal(t, 1, s.FailureCount)
	assert.Equal(t, "scheduler-1", s.LockedBy)
	assert.Equal(t, t0.Add(5*time.Second), *s.CompleteBy)
	assert.Equal(t, int64(3), task.Revision)
}

func TestEventsRoundTripByWireName(t *testing.T) {
	for _, e := range []domain.Event{submitted(), dispatched("reserve-inventory", "inventory", 1), succeeded("x", 1),
		failed("x", 1, domain.FailurePermanent), domain.TaskProcessed{TaskID: "o-1", At: t0}, domain.TaskFailed{TaskID: "o-1", Reason: "r", At: t0}} {
		data, err := domain.EncodeEvent(e)
		require.NoError(t, err)
		back, err := domain.DecodeEvent(e.EventType(), data)
		require.NoError(t, err)
		assert.Equal(t, e, back)
	}
	_, err := domain.DecodeEvent("Teleported", []byte(`{}`))
	assert.ErrorIs(t, err, domain.ErrUnknownEventType)
}

func TestParseOrder(t *testing.T) {
	o, err := domain.ParseOrder([]byte(` {"orderId":"o-1","items":[1,2]} `), 1024)
	require.NoError(t, err)
	assert.Equal(t, "o-1", o.OrderID)
	assert.Equal(t, "order", o.Workflow, "workflow defaults to order")
	assert.JSONEq(t, `{"orderId":"o-1","items":[1,2]}`, string(o.Raw))

	for name, body := range map[string]string{
		"not json":            `{"orderId":`,
		"not an object":       `["o-1"]`,
		"missing orderId":     `{"workflow":"order"}`,
		"orderId wrong type":  `{"orderId":42}`,
		"orderId with spaces": `{"orderId":"a b"}`,
		"bad replyTo":         `{"orderId":"o-1","replyTo":"no/slashes"}`,
		"oversized":           `{"orderId":"o-1","pad":"` + string(make([]byte, 2048)) + `"}`,
		"empty":               ``,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := domain.ParseOrder([]byte(body), 1024)
			assert.ErrorIs(t, err, domain.ErrInvalidMessage)
		})
	}
}

func TestParseStepReply(t *testing.T) {
	r, err := domain.ParseStepReply([]byte(`{"taskId":"o-1","step":"s","attempt":1,"outcome":"succeeded"}`))
	require.NoError(t, err)
	assert.Equal(t, domain.ActionExecute, r.Action)
	for _, body := range []string{`{}`, `nope`, `{"taskId":"o-1","step":"s","attempt":0,"outcome":"succeeded"}`,
		`{"taskId":"o-1","step":"s","attempt":1,"outcome":"maybe"}`, `{"taskId":"o-1","step":"s","attempt":1,"outcome":"failed"}`,
		`{"taskId":1,"step":"s","attempt":1,"outcome":"succeeded"}`} {
		_, err := domain.ParseStepReply([]byte(body))
		assert.ErrorIs(t, err, domain.ErrInvalidMessage, body)
	}
}

func TestCatalogValidates(t *testing.T) {
	_, err := domain.NewCatalog(&domain.Workflow{Name: "bad", Steps: []domain.StepDefinition{{Name: "a"}, {Name: "a", Agent: "x", Budget: time.Second, MaxAttempts: 1}}})
	require.Error(t, err)
	c, err := domain.NewCatalog(domain.OrderWorkflow())
	require.NoError(t, err)
	_, err = c.Lookup("nope")
	assert.ErrorIs(t, err, domain.ErrUnknownWorkflow)
	assert.Equal(t, []string{"inventory", "payment", "shipping"}, c.Agents())
}
