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
	t0      = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	backoff = domain.Backoff{Initial: time.Second, Multiplier: 2, Max: 10 * time.Second}
	wf      = orderWorkflow().WithBudget(5*time.Second, backoff)
	d       = domain.Decision{Now: t0, Actor: "scheduler-1"}
)

func at(offset time.Duration) domain.Decision {
	return domain.Decision{Now: t0.Add(offset), Actor: "scheduler-1"}
}

func submitted() domain.TaskSubmitted {
	return domain.TaskSubmitted{TaskID: "o-1", Workflow: "order", Steps: wf.StepNames(), Order: json.RawMessage(`{"orderId":"o-1"}`), SubmittedAt: t0}
}

var agents = map[string]string{"reserve-inventory": "inventory", "charge-payment": "payment", "schedule-shipping": "shipping"}
var compensations = map[string]string{"reserve-inventory": "release-inventory", "charge-payment": "refund-payment", "schedule-shipping": "cancel-shipping"}

func dispatchedAt(step string, attempt int, now time.Time) domain.StepDispatched {
	return domain.StepDispatched{TaskID: "o-1", Step: step, Agent: agents[step], Attempt: attempt, CompleteBy: now.Add(5 * time.Second),
		LockedBy: "scheduler-1", IdempotencyKey: "o-1/" + step, DispatchedAt: now}
}

func dispatched(step string, attempt int) domain.StepDispatched {
	return dispatchedAt(step, attempt, t0)
}

func compensationDispatched(step string, attempt int) domain.CompensationDispatched {
	return domain.CompensationDispatched{TaskID: "o-1", Step: step, Agent: agents[step], Action: compensations[step], Attempt: attempt,
		CompleteBy: t0.Add(5 * time.Second), LockedBy: "scheduler-1", IdempotencyKey: "o-1/" + step + "/compensation", DispatchedAt: t0}
}

func succeeded(step string, attempt int) domain.StepSucceeded {
	return domain.StepSucceeded{TaskID: "o-1", Step: step, Attempt: attempt, At: t0}
}

func failed(step string, attempt int, kind domain.FailureKind) domain.StepFailed {
	return domain.StepFailed{TaskID: "o-1", Step: step, Attempt: attempt, Failure: kind, Reason: "boom", At: t0}
}

func retryScheduled(step string, compensation bool, attempt int, wait time.Duration) domain.StepRetryScheduled {
	return domain.StepRetryScheduled{TaskID: "o-1", Step: step, Compensation: compensation, Attempt: attempt, NotBefore: t0.Add(wait), At: t0}
}

// reply is an agent's reply for an attempt: a success when kind is empty,
// else a failure of that kind.
func reply(step string, attempt int, kind domain.FailureKind) domain.Reply {
	return domain.Reply{Step: step, Attempt: attempt, Succeeded: kind == "", Failure: kind, Reason: "boom"}
}

func compensationReply(step string, attempt int, kind domain.FailureKind) domain.Reply {
	r := reply(step, attempt, kind)
	r.Compensation = true
	return r
}

// processed is the history of a task whose first n steps succeeded.
func processed(n int) []domain.Event {
	events := []domain.Event{submitted()}
	for _, step := range wf.StepNames()[:n] {
		events = append(events, dispatched(step, 1), succeeded(step, 1))
	}
	return events
}

func with(base []domain.Event, more ...domain.Event) []domain.Event {
	return append(append([]domain.Event(nil), base...), more...)
}

func TestNext(t *testing.T) {
	cases := []struct {
		name  string
		given []domain.Event
		when  domain.Decision
		then  []domain.Event
	}{
		{"nothing before submission", nil, d, nil},
		{"submission dispatches the first step", processed(0), d, []domain.Event{dispatched("reserve-inventory", 1)}},
		{"nothing while a step is in flight", with(processed(0), dispatched("reserve-inventory", 1)), d, nil},
		{"success dispatches the next step", processed(1), d, []domain.Event{dispatched("charge-payment", 1)}},
		{"all steps done processes the task", processed(3), d, []domain.Event{domain.TaskProcessed{TaskID: "o-1", At: t0}}},
		{"a retry waits until it is due", with(processed(0), dispatched("reserve-inventory", 1), failed("reserve-inventory", 1, domain.FailureTransient),
			retryScheduled("reserve-inventory", false, 2, time.Second)), at(999 * time.Millisecond), nil},
		{"a due retry dispatches the next attempt", with(processed(0), dispatched("reserve-inventory", 1), failed("reserve-inventory", 1, domain.FailureTransient),
			retryScheduled("reserve-inventory", false, 2, time.Second)), at(time.Second), []domain.Event{dispatchedAt("reserve-inventory", 2, t0.Add(time.Second))}},
		{"nothing after a terminal state", with(processed(0), domain.TaskFailed{TaskID: "o-1", Reason: "x", At: t0}), d, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.then, domain.Fold("o-1", tc.given).Next(wf, tc.when))
		})
	}
}

func TestRecordReply(t *testing.T) {
	inFlight := with(processed(0), dispatched("reserve-inventory", 2))
	paying := with(processed(1), dispatched("charge-payment", 1))
	cases := []struct {
		name    string
		given   []domain.Event
		reply   domain.Reply
		then    []domain.Event
		wantErr error
	}{
		{"success records and moves on", inFlight, reply("reserve-inventory", 2, ""),
			[]domain.Event{succeeded("reserve-inventory", 2), dispatched("charge-payment", 1)}, nil},
		{"transient failure schedules a retry after the backoff", inFlight, reply("reserve-inventory", 2, domain.FailureTransient),
			[]domain.Event{failed("reserve-inventory", 2, domain.FailureTransient), retryScheduled("reserve-inventory", false, 3, 2*time.Second)}, nil},
		{"permanent failure compensates at once, skipping the refused step", paying, reply("charge-payment", 1, domain.FailurePermanent),
			[]domain.Event{failed("charge-payment", 1, domain.FailurePermanent),
				domain.CompensationRequested{TaskID: "o-1", Step: "charge-payment", Reason: "step charge-payment failed permanently: boom", RequestedBy: "scheduler-1", At: t0},
				compensationDispatched("reserve-inventory", 1)}, nil},
		{"last success finishes the task", with(processed(2), dispatched("schedule-shipping", 1)), reply("schedule-shipping", 1, ""),
			[]domain.Event{succeeded("schedule-shipping", 1), domain.TaskProcessed{TaskID: "o-1", At: t0}}, nil},
		{"stale attempt is ignored", inFlight, reply("reserve-inventory", 1, ""), nil, domain.ErrStaleReply},
		{"reply for a step not in flight is stale", inFlight, reply("charge-payment", 1, ""), nil, domain.ErrStaleReply},
		{"compensation reply when none is in flight is stale", inFlight, compensationReply("reserve-inventory", 2, ""), nil, domain.ErrStaleReply},
		{"made-up step is rejected", inFlight, reply("teleport", 1, ""), nil, domain.ErrUnknownStep},
		{"unknown task is rejected", nil, reply("reserve-inventory", 1, ""), nil, domain.ErrTaskNotFound},
		{"duplicate reply after success is stale", with(inFlight, succeeded("reserve-inventory", 2)), reply("reserve-inventory", 2, ""), nil, domain.ErrStaleReply},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := domain.Fold("o-1", tc.given).RecordReply(wf, tc.reply, d)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.then, got)
		})
	}
}

func TestCompensationReplies(t *testing.T) {
	compensating := with(processed(2), dispatched("schedule-shipping", 1), failed("schedule-shipping", 1, domain.FailurePermanent),
		domain.CompensationRequested{TaskID: "o-1", Step: "schedule-shipping", Reason: "r", At: t0}, compensationDispatched("charge-payment", 1))
	got, err := domain.Fold("o-1", compensating).RecordReply(wf, compensationReply("charge-payment", 1, ""), d)
	require.NoError(t, err)
	assert.Equal(t, []domain.Event{domain.StepCompensated{TaskID: "o-1", Step: "charge-payment", Attempt: 1, At: t0},
		compensationDispatched("reserve-inventory", 1)}, got, "compensations run in reverse order")

	got, err = domain.Fold("o-1", compensating).RecordReply(wf, compensationReply("charge-payment", 1, domain.FailureTransient), d)
	require.NoError(t, err)
	assert.Equal(t, []domain.Event{domain.CompensationFailed{TaskID: "o-1", Step: "charge-payment", Attempt: 1, Failure: domain.FailureTransient, Reason: "boom", At: t0},
		retryScheduled("charge-payment", true, 2, time.Second)}, got, "a failed compensation is retried")

	last := with(compensating, domain.StepCompensated{TaskID: "o-1", Step: "charge-payment", Attempt: 1, At: t0}, compensationDispatched("reserve-inventory", 1))
	got, err = domain.Fold("o-1", last).RecordReply(wf, compensationReply("reserve-inventory", 1, ""), d)
	require.NoError(t, err)
	assert.Equal(t, []domain.Event{domain.StepCompensated{TaskID: "o-1", Step: "reserve-inventory", Attempt: 1, At: t0},
		domain.TaskCompensated{TaskID: "o-1", At: t0}}, got)
}

func TestCompensationThatKeepsFailingEndsInError(t *testing.T) {
	history := with(processed(1), dispatched("charge-payment", 1), failed("charge-payment", 1, domain.FailurePermanent),
		domain.CompensationRequested{TaskID: "o-1", Step: "charge-payment", Reason: "r", At: t0})
	max := wf.Steps[0].Compensation.MaxAttempts
	for attempt := 1; attempt <= max; attempt++ {
		history = append(history, compensationDispatched("reserve-inventory", attempt))
		got, err := domain.Fold("o-1", history).RecordReply(wf, compensationReply("reserve-inventory", attempt, domain.FailureTransient), d)
		require.NoError(t, err)
		history = append(history, got...)
	}
	task := domain.Fold("o-1", history)
	assert.Equal(t, domain.StateError, task.State)
	assert.Contains(t, task.Reason, "compensation of step reserve-inventory failed after 5 attempts")
	inv := task.Step("reserve-inventory")
	assert.Equal(t, domain.StepStateError, inv.State)
	assert.Equal(t, max, inv.Compensation.FailureCount)

	got, err := task.Resubmit(wf, "", "alice", d)
	require.NoError(t, err)
	assert.Equal(t, []domain.Event{domain.StepResubmitted{TaskID: "o-1", Step: "reserve-inventory", Compensation: true, By: "alice", At: t0}}, got)
	assert.Equal(t, []domain.Event{compensationDispatched("reserve-inventory", max+1)}, domain.Fold("o-1", with(history, got...)).Next(wf, d),
		"the scheduler resumes the compensation")
}

func TestTimeOut(t *testing.T) {
	inFlight := with(processed(0), dispatched("reserve-inventory", 1))
	supervisor := domain.Decision{Now: t0.Add(5 * time.Second), Actor: "supervisor-1"}
	got, err := domain.Fold("o-1", inFlight).TimeOut(wf, "reserve-inventory", false, 1, supervisor)
	require.NoError(t, err)
	assert.Equal(t, []domain.Event{
		domain.StepTimedOut{TaskID: "o-1", Step: "reserve-inventory", Attempt: 1, FailureCount: 1, CompleteBy: t0.Add(5 * time.Second), DetectedBy: "supervisor-1", At: t0.Add(5 * time.Second)},
		domain.StepRetryScheduled{TaskID: "o-1", Step: "reserve-inventory", Attempt: 2, NotBefore: t0.Add(6 * time.Second), At: t0.Add(5 * time.Second)},
	}, got, "a timeout requests a retry; it dispatches nothing")

	_, err = domain.Fold("o-1", inFlight).TimeOut(wf, "reserve-inventory", false, 1, at(4*time.Second))
	assert.ErrorIs(t, err, domain.ErrNotDue)
	_, err = domain.Fold("o-1", with(inFlight, got...)).TimeOut(wf, "reserve-inventory", false, 1, supervisor)
	assert.ErrorIs(t, err, domain.ErrNotInFlight, "an attempt times out once")
	_, err = domain.Fold("o-1", with(inFlight, succeeded("reserve-inventory", 1))).TimeOut(wf, "reserve-inventory", false, 1, supervisor)
	assert.ErrorIs(t, err, domain.ErrNotInFlight, "an answered attempt does not time out")
}

// TestHungAgentIsRetriedThenCompensatedInReverseOrder plays the scheduler and
// the supervisor against an agent that never answers the last step, and
// checks the exact event sequence.
func TestHungAgentIsRetriedThenCompensatedInReverseOrder(t *testing.T) {
	history := with(processed(2))
	now := t0
	decide := func(events []domain.Event) { history = append(history, events...) }
	task := func() *domain.Task { return domain.Fold("o-1", history) }
	for attempt := 1; attempt <= 3; attempt++ {
		decide(task().Next(wf, domain.Decision{Now: now, Actor: "scheduler-1"}))
		now = now.Add(5 * time.Second)
		events, err := task().TimeOut(wf, "schedule-shipping", false, attempt, domain.Decision{Now: now, Actor: "supervisor-1"})
		require.NoError(t, err)
		decide(events)
		if wake, ok := task().NextWake(); ok {
			now = wake
		}
	}
	decide(task().Next(wf, domain.Decision{Now: now, Actor: "scheduler-1"}))
	for _, step := range []string{"schedule-shipping", "charge-payment", "reserve-inventory"} {
		events, err := task().RecordReply(wf, compensationReply(step, 1, ""), domain.Decision{Now: now, Actor: "scheduler-1"})
		require.NoError(t, err, step)
		decide(events)
	}
	var types []string
	var compensated []string
	for _, e := range history[len(processed(2)):] {
		types = append(types, e.EventType())
		if c, ok := e.(domain.CompensationDispatched); ok {
			compensated = append(compensated, c.Step)
		}
	}
	assert.Equal(t, []string{
		"StepDispatched", "StepTimedOut", "StepRetryScheduled",
		"StepDispatched", "StepTimedOut", "StepRetryScheduled",
		"StepDispatched", "StepTimedOut", "CompensationRequested",
		"CompensationDispatched", "StepCompensated",
		"CompensationDispatched", "StepCompensated",
		"CompensationDispatched", "StepCompensated", "TaskCompensated",
	}, types)
	assert.Equal(t, []string{"schedule-shipping", "charge-payment", "reserve-inventory"}, compensated,
		"the timed-out step may have taken effect, so it is compensated too, first")
	final := task()
	assert.Equal(t, domain.StateCompensated, final.State)
	assert.Equal(t, 3, final.Step("schedule-shipping").FailureCount)
}

func TestExhaustedPolicies(t *testing.T) {
	exhausted := with(processed(0), dispatched("reserve-inventory", 3), failed("reserve-inventory", 3, domain.FailureTransient))
	for policy, want := range map[domain.ExhaustedPolicy]domain.Event{
		domain.ErrorOnExhausted: domain.TaskFailed{TaskID: "o-1", Step: "reserve-inventory", Reason: "step reserve-inventory failed after 3 of 3 attempts: boom", At: t0},
		domain.WaitOnExhausted:  retryScheduled("reserve-inventory", false, 4, backoff.Max),
		domain.CompensateOnExhausted: domain.CompensationRequested{TaskID: "o-1", Step: "reserve-inventory",
			Reason: "step reserve-inventory failed after 3 of 3 attempts: boom", RequestedBy: "scheduler-1", At: t0},
	} {
		t.Run(string(policy), func(t *testing.T) {
			w := *wf
			w.Steps = append([]domain.StepDefinition(nil), wf.Steps...)
			w.Steps[0].OnExhausted = policy
			assert.Equal(t, []domain.Event{want}, domain.Fold("o-1", exhausted).Next(&w, d))
		})
	}
}

func TestOperatorRetryOfAFailedStep(t *testing.T) {
	w := *wf
	w.Steps = append([]domain.StepDefinition(nil), wf.Steps...)
	w.Steps[1].OnExhausted = domain.ErrorOnExhausted
	history := with(processed(1), dispatched("charge-payment", 1), failed("charge-payment", 1, domain.FailurePermanent),
		domain.TaskFailed{TaskID: "o-1", Step: "charge-payment", Reason: "r", At: t0})
	task := domain.Fold("o-1", history)
	got, err := task.Resubmit(&w, "charge-payment", "alice", d)
	require.NoError(t, err)
	assert.Equal(t, []domain.Event{domain.StepResubmitted{TaskID: "o-1", Step: "charge-payment", By: "alice", At: t0}}, got)
	after := domain.Fold("o-1", with(history, got...))
	assert.Equal(t, []domain.Event{dispatched("charge-payment", 2)}, after.Next(&w, d))
	assert.Equal(t, domain.StateProcessing, after.State)
	assert.Equal(t, 1, after.Step("charge-payment").AttemptBase, "attempts count afresh after a resubmission")

	_, err = domain.Fold("o-1", processed(1)).Resubmit(&w, "", "alice", d)
	assert.ErrorIs(t, err, domain.ErrNotAllowed)
	_, err = task.Resubmit(&w, "reserve-inventory", "alice", d)
	assert.ErrorIs(t, err, domain.ErrNotAllowed, "only the failed step can be retried")
}

func TestCancelWaitsForTheStepInFlightThenCompensates(t *testing.T) {
	history := with(processed(1), dispatched("charge-payment", 1))
	got, err := domain.Fold("o-1", history).Cancel(wf, "bob", "customer asked", d)
	require.NoError(t, err)
	assert.Equal(t, []domain.Event{domain.TaskCancelled{TaskID: "o-1", By: "bob", Reason: "customer asked", At: t0}}, got,
		"nothing is undone while the payment's outcome is unknown")
	history = append(history, got...)
	got, err = domain.Fold("o-1", history).RecordReply(wf, reply("charge-payment", 1, ""), d)
	require.NoError(t, err)
	assert.Equal(t, []domain.Event{succeeded("charge-payment", 1), compensationDispatched("charge-payment", 1)}, got,
		"the reply that arrives after the cancellation is recorded, then undone")

	_, err = domain.Fold("o-1", with(processed(3), domain.TaskProcessed{TaskID: "o-1", At: t0})).Cancel(wf, "bob", "", d)
	assert.ErrorIs(t, err, domain.ErrNotAllowed)
	cancelled, err := domain.Fold("o-1", processed(0)).Cancel(wf, "bob", "", d)
	require.NoError(t, err)
	assert.Equal(t, []domain.Event{domain.TaskCompensated{TaskID: "o-1", At: t0}}, domain.Fold("o-1", with(processed(0), cancelled...)).Next(wf, d),
		"a task that did nothing compensates at once")
}

func TestFoldTracksStepState(t *testing.T) {
	task := domain.Fold("o-1", with(processed(0), dispatched("reserve-inventory", 1), failed("reserve-inventory", 1, domain.FailureTransient),
		retryScheduled("reserve-inventory", false, 2, time.Second), dispatched("reserve-inventory", 2)))
	s := task.Step("reserve-inventory")
	assert.Equal(t, domain.StateProcessing, task.State)
	assert.Equal(t, domain.StepStateProcessing, s.State)
	assert.Equal(t, 2, s.Attempt)
	assert.Equal(t, 1, s.FailureCount)
	assert.Equal(t, "scheduler-1", s.LockedBy)
	assert.Equal(t, t0.Add(5*time.Second), *s.CompleteBy)
	assert.Nil(t, s.NotBefore)
	assert.Equal(t, int64(4), task.Revision)
}

func TestBackoffDelay(t *testing.T) {
	b := domain.Backoff{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second, Jitter: 0.5}
	assert.Equal(t, 50*time.Millisecond, b.Delay(1, 0))
	assert.Equal(t, 100*time.Millisecond, b.Delay(1, 1))
	assert.Equal(t, 400*time.Millisecond, b.Delay(3, 1))
	assert.Equal(t, time.Second, b.Delay(10, 1), "capped at Max")
}

func TestEventsRoundTripByWireName(t *testing.T) {
	for _, e := range []domain.Event{submitted(), dispatched("reserve-inventory", 1), succeeded("x", 1),
		failed("x", 1, domain.FailurePermanent), domain.TaskProcessed{TaskID: "o-1", At: t0}, domain.TaskFailed{TaskID: "o-1", Reason: "r", At: t0},
		domain.StepTimedOut{TaskID: "o-1", Step: "x", Attempt: 1, FailureCount: 1, CompleteBy: t0, DetectedBy: "s", At: t0},
		retryScheduled("x", true, 2, time.Second), domain.CompensationRequested{TaskID: "o-1", Reason: "r", RequestedBy: "s", At: t0},
		compensationDispatched("charge-payment", 1), domain.StepCompensated{TaskID: "o-1", Step: "x", Attempt: 1, At: t0},
		domain.CompensationFailed{TaskID: "o-1", Step: "x", Attempt: 1, Failure: domain.FailureTransient, Reason: "r", At: t0},
		domain.TaskCompensated{TaskID: "o-1", At: t0}, domain.StepResubmitted{TaskID: "o-1", Step: "x", By: "a", At: t0},
		domain.TaskCancelled{TaskID: "o-1", By: "a", Reason: "r", At: t0}} {
		data, err := domain.EncodeEvent(e)
		require.NoError(t, err)
		back, err := domain.DecodeEvent(e.EventType(), data)
		require.NoError(t, err)
		assert.Equal(t, e, back)
	}
	_, err := domain.DecodeEvent("Teleported", []byte(`{}`))
	assert.ErrorIs(t, err, domain.ErrUnknownEventType)
}
