package invariants_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/integration/invariants"
)

func recorded(t *testing.T, events ...domain.Event) []domain.RecordedEvent {
	out := make([]domain.RecordedEvent, len(events))
	for i, e := range events {
		data, err := json.Marshal(e)
		require.NoError(t, err)
		out[i] = domain.RecordedEvent{Type: e.EventType(), Data: data, Revision: uint64(i)}
	}
	return out
}

func TestStreamFindsAnAttemptTimedOutTwice(t *testing.T) {
	timedOut := domain.StepTimedOut{TaskID: "t", Step: "a", Attempt: 1}
	_, problems := invariants.Stream("t", recorded(t, domain.StepDispatched{TaskID: "t", Step: "a", Attempt: 1}, timedOut, timedOut))
	assert.Len(t, problems, 1)
}

func TestStreamAllowsAnAttemptGivenBackToGoAgain(t *testing.T) {
	dispatched := domain.StepDispatched{TaskID: "t", Step: "a", Attempt: 1}
	_, problems := invariants.Stream("t", recorded(t, dispatched, domain.StepReturned{TaskID: "t", Step: "a", Attempt: 1, Reason: "unhealthy"}, dispatched))
	assert.Empty(t, problems)
	_, problems = invariants.Stream("t", recorded(t, dispatched, dispatched))
	assert.Len(t, problems, 1)
}

func TestStreamFindsATimeoutOfAnOlderLeaseTerm(t *testing.T) {
	events := recorded(t,
		domain.StepDispatched{TaskID: "t", Step: "a", Attempt: 1},
		domain.StepTimedOut{TaskID: "t", Step: "a", Attempt: 1, LeaseTerm: 3},
		domain.StepDispatched{TaskID: "t", Step: "a", Attempt: 2},
		domain.StepTimedOut{TaskID: "t", Step: "a", Attempt: 2, LeaseTerm: 2})
	_, problems := invariants.Stream("t", events)
	require.Len(t, problems, 1)
	assert.Contains(t, problems[0], "lease term 2 after one in term 3")
	_, problems = invariants.Stream("t", events[:3])
	assert.Empty(t, problems)
}

func TestEffectsFindsACompensationOfAStepRefusedForGood(t *testing.T) {
	dispatched := domain.StepDispatched{TaskID: "t", Step: "a", Attempt: 1}
	refused := domain.StepFailed{TaskID: "t", Step: "a", Attempt: 1, Failure: domain.FailurePermanent}
	compensated := domain.CompensationDispatched{TaskID: "t", Step: "a", Attempt: 1}
	assert.Len(t, invariants.Effects("t", recorded(t, dispatched, refused, compensated)), 1)
	assert.Len(t, invariants.Effects("t", recorded(t, compensated)), 1, "never sent")

	timedOut := domain.StepTimedOut{TaskID: "t", Step: "a", Attempt: 1}
	assert.Empty(t, invariants.Effects("t", recorded(t, dispatched, timedOut, compensated)), "a timed-out attempt may have taken effect")
	succeeded := domain.StepSucceeded{TaskID: "t", Step: "a", Attempt: 1}
	assert.Empty(t, invariants.Effects("t", recorded(t, dispatched, succeeded, compensated)))
	assert.Len(t, invariants.Effects("t", recorded(t, dispatched, succeeded, succeeded)), 1, "succeeded twice")
}

func TestOverlappingLeaders(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	act := func(actor string, pos uint64, after time.Duration) invariants.Action {
		return invariants.Action{Actor: actor, Position: pos, Recorded: at.Add(after)}
	}
	// B took over while A still acted, and A acted again a second later.
	assert.Len(t, invariants.OverlappingLeaders([]invariants.Action{
		act("supervisor/a", 1, 0), act("supervisor/b", 2, 500*time.Millisecond), act("supervisor/a", 3, time.Second),
	}, 6*time.Second), 1)
	// A handover and back, each after a session timeout: no overlap.
	assert.Empty(t, invariants.OverlappingLeaders([]invariants.Action{
		act("supervisor/a", 1, 0), act("supervisor/b", 2, 7*time.Second), act("supervisor/b", 3, 8*time.Second), act("supervisor/a", 4, 15*time.Second),
	}, 6*time.Second))
}
