package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

// timedOutInTerm is attempt's timeout of reserve-inventory by a supervisor
// in lease term term.
func timedOutInTerm(attempt int, term int64) domain.StepTimedOut {
	return domain.StepTimedOut{TaskID: "o-1", Step: "reserve-inventory", Attempt: attempt, FailureCount: attempt,
		CompleteBy: t0.Add(5 * time.Second), DetectedBy: "supervisor-1", At: t0.Add(6 * time.Second), LeaseTerm: term}
}

// TestTimeOutInTermRecordsItsTerm: the StepTimedOut of a supervisor in a
// lease term carries it, and the task folds it as its newest term.
func TestTimeOutInTermRecordsItsTerm(t *testing.T) {
	task := domain.Fold("o-1", with(processed(0), dispatched("reserve-inventory", 1)))
	assert.Zero(t, task.LeaseTerm)
	events, err := task.TimeOutInTerm(wf, "reserve-inventory", false, 1, 3, at(6*time.Second))
	require.NoError(t, err)
	require.IsType(t, domain.StepTimedOut{}, events[0])
	assert.EqualValues(t, 3, events[0].(domain.StepTimedOut).LeaseTerm)
	assert.Equal(t, domain.StepRetryScheduledType, events[1].EventType(), "what follows is decided as before")
	for _, e := range events {
		task.Apply(e)
	}
	assert.EqualValues(t, 3, task.LeaseTerm)
}

// TestAnActionOfAnOlderTermIsRefused: once a supervisor in term 5 timed
// out an attempt of the task, a supervisor still in term 4 (paused, or
// cut off, with timers that lie) may not time out the next attempt; one
// in term 5 or later may.
func TestAnActionOfAnOlderTermIsRefused(t *testing.T) {
	history := with(processed(0), dispatched("reserve-inventory", 1), timedOutInTerm(1, 5),
		retryScheduled("reserve-inventory", false, 2, time.Second), dispatchedAt("reserve-inventory", 2, t0.Add(7*time.Second)))
	task := domain.Fold("o-1", history)
	require.EqualValues(t, 5, task.LeaseTerm)
	due := at(13 * time.Second)

	_, err := task.TimeOutInTerm(wf, "reserve-inventory", false, 2, 4, due)
	require.ErrorIs(t, err, domain.ErrStaleLeaseTerm)
	_, err = task.TimeOutInTerm(wf, "reserve-inventory", false, 2, 0, due)
	require.ErrorIs(t, err, domain.ErrStaleLeaseTerm, "a supervisor with no term is older than any")

	for _, term := range []int64{5, 6} {
		events, err := task.TimeOutInTerm(wf, "reserve-inventory", false, 2, term, due)
		require.NoError(t, err, "term %d", term)
		assert.Equal(t, term, events[0].(domain.StepTimedOut).LeaseTerm)
	}
	// A scheduler's events carry no term and do not lower it.
	task.Apply(retryScheduled("reserve-inventory", false, 3, time.Second))
	assert.EqualValues(t, 5, task.LeaseTerm)
}

// TestStreamsRecordedBeforeTermsFoldTheSame: a StepTimedOut stored before
// lease terms has no leaseTerm field; it decodes to term 0, a term-less
// timeout encodes without the field, and the task folds as it did, so any
// supervisor term may act on it.
func TestStreamsRecordedBeforeTermsFoldTheSame(t *testing.T) {
	old := []byte(`{"taskId":"o-1","step":"reserve-inventory","attempt":1,"failureCount":1,` +
		`"completeBy":"2026-11-21T10:00:05Z","detectedBy":"supervisor-1","at":"2026-11-21T10:00:06Z"}`)
	decoded, err := domain.DecodeEvent(domain.StepTimedOutType, old)
	require.NoError(t, err)
	assert.Equal(t, timedOutInTerm(1, 0), decoded)
	encoded, err := domain.EncodeEvent(decoded)
	require.NoError(t, err)
	assert.JSONEq(t, string(old), string(encoded))
	assert.NotContains(t, string(encoded), "leaseTerm")

	withTerm, err := domain.EncodeEvent(timedOutInTerm(1, 7))
	require.NoError(t, err)
	assert.Contains(t, string(withTerm), `"leaseTerm":7`)

	history := with(processed(0), dispatched("reserve-inventory", 1))
	before := domain.Fold("o-1", with(history, timedOutInTerm(1, 0)))
	after := domain.Fold("o-1", with(history, decoded))
	assert.Equal(t, before, after)
	assert.Zero(t, after.LeaseTerm)
	after.Apply(retryScheduled("reserve-inventory", false, 2, time.Second))
	after.Apply(dispatchedAt("reserve-inventory", 2, t0.Add(7*time.Second)))
	_, err = after.TimeOutInTerm(wf, "reserve-inventory", false, 2, 1, at(13*time.Second))
	assert.NoError(t, err)
}
