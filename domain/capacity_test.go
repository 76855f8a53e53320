package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

// full is an admission that has no room for agent.
func full(agent string) func(string, []domain.InFlightAttempt) domain.Admission {
	return func(a string, _ []domain.InFlightAttempt) domain.Admission {
		if a == agent {
			return domain.Admission{Reason: "at capacity: 2 of 2 in flight"}
		}
		return domain.Admission{OK: true, Instance: a + "-1"}
	}
}

func TestAStepWaitsOnceForRoomAtItsAgent(t *testing.T) {
	task := domain.Fold("o-1", processed(1))
	dec := d
	dec.Admit = full("payment")
	events := task.Next(wf, dec)
	require.Equal(t, []domain.Event{domain.StepWaiting{TaskID: "o-1", Step: "charge-payment", Agent: "payment",
		Reason: "at capacity: 2 of 2 in flight", At: t0}}, events)
	task.Apply(events[0])
	assert.True(t, task.Step("charge-payment").Waiting())
	assert.Empty(t, task.Next(wf, dec), "a waiting step is recorded as waiting once, not at every decision")

	events = task.Next(wf, d) // room again
	require.Len(t, events, 1)
	require.IsType(t, domain.StepDispatched{}, events[0])
	assert.Equal(t, 1, events[0].(domain.StepDispatched).Attempt)
	task.Apply(events[0])
	assert.False(t, task.Step("charge-payment").Waiting(), "the dispatch ends the wait")
}

func TestACompensationWaitsForRoomToo(t *testing.T) {
	task := domain.Fold("o-1", with(processed(1), dispatched("charge-payment", 1)))
	dec := d
	dec.Admit = full("inventory")
	events, err := task.RecordReply(wf, reply("charge-payment", 1, domain.FailurePermanent), dec)
	require.NoError(t, err)
	last := events[len(events)-1]
	assert.Equal(t, domain.StepWaiting{TaskID: "o-1", Step: "reserve-inventory", Compensation: true, Agent: "inventory",
		Reason: "at capacity: 2 of 2 in flight", At: t0}, last)
}

func TestAReturnedAttemptDoesNotCount(t *testing.T) {
	task := domain.Fold("o-1", with(processed(1), dispatched("charge-payment", 1)))
	r := domain.Reply{Step: "charge-payment", Attempt: 1, Unavailable: true, Instance: "payment-2", Reason: "calls hang"}
	dec := d
	dec.Admit = full("payment")
	events, err := task.RecordReply(wf, r, dec)
	require.NoError(t, err)
	require.Equal(t, []domain.Event{
		domain.StepReturned{TaskID: "o-1", Step: "charge-payment", Attempt: 1, Instance: "payment-2", Reason: "calls hang", At: t0},
		domain.StepWaiting{TaskID: "o-1", Step: "charge-payment", Agent: "payment", Reason: "at capacity: 2 of 2 in flight", At: t0},
	}, events)
	for _, e := range events {
		task.Apply(e)
	}
	s := task.Step("charge-payment")
	assert.Equal(t, 0, s.Attempt, "the attempt given back is not counted")
	assert.Equal(t, 0, s.FailureCount)
	assert.Equal(t, 1, s.Returned)
	assert.Equal(t, "payment-2: calls hang", s.LastReturn)

	events = task.Next(wf, d)
	require.Len(t, events, 1)
	assert.Equal(t, 1, events[0].(domain.StepDispatched).Attempt, "the same attempt number goes again")

	_, err = task.RecordReply(wf, r, d)
	assert.ErrorIs(t, err, domain.ErrStaleReply, "a second give-back of the same attempt changes nothing")
}

func TestAReturnedAttemptThatWasNeverCalledNeedsNoUndo(t *testing.T) {
	task := domain.Fold("o-1", with(processed(1), dispatched("charge-payment", 1),
		domain.StepReturned{TaskID: "o-1", Step: "charge-payment", Attempt: 1, Reason: "breaker open", At: t0},
		domain.TaskCancelled{TaskID: "o-1", By: "ops", At: t0}))
	events := task.Next(wf, d)
	require.Len(t, events, 1)
	c, ok := events[0].(domain.CompensationDispatched)
	require.True(t, ok, "got %#v", events[0])
	assert.Equal(t, "reserve-inventory", c.Step, "charge-payment never reached its service, so only inventory is undone")
}

func TestRepliesRecordTriesAndInstance(t *testing.T) {
	task := domain.Fold("o-1", with(processed(1), dispatched("charge-payment", 1)))
	r := reply("charge-payment", 1, domain.FailureTransient)
	r.Tries, r.Instance = 3, "payment-1"
	events, err := task.RecordReply(wf, r, d)
	require.NoError(t, err)
	for _, e := range events {
		task.Apply(e)
	}
	s := task.Step("charge-payment")
	assert.Equal(t, 3, s.Tries)
	assert.Equal(t, "payment-1", s.Instance)
	assert.Equal(t, 1, s.FailureCount)
}

func TestAStepGivenBackWithNowhereToGoPausesBeforeItGoesAgain(t *testing.T) {
	task := domain.Fold("o-1", with(processed(1), dispatched("charge-payment", 1)))
	dec := d
	dec.ReturnPause = time.Second
	events, err := task.RecordReply(wf, domain.Reply{Step: "charge-payment", Attempt: 1, Unavailable: true, Reason: "breaker open"}, dec)
	require.NoError(t, err)
	require.Len(t, events, 1, "nothing is dispatched during the pause")
	task.Apply(events[0])
	assert.Empty(t, task.Next(wf, at(500*time.Millisecond)))
	wake, ok := task.NextWake()
	require.True(t, ok)
	assert.Equal(t, t0.Add(time.Second), wake)
	again := task.Next(wf, at(time.Second))
	require.Len(t, again, 1)
	assert.Equal(t, 1, again[0].(domain.StepDispatched).Attempt)
}
