package domain_test

import (
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

const retentionSteps = `"steps":[{"name":"a","agent":"x"}]`

func TestRetentionOfFinishedTasksIsReadAndRoundTrips(t *testing.T) {
	w, err := domain.ParseDefinition([]byte(`{"name":"w","retention":{"finishedTasks":"1h"},` + retentionSteps + `}`))
	require.NoError(t, err)
	assert.Equal(t, time.Hour, w.Retention.FinishedTasks)

	doc, err := w.MarshalDefinition()
	require.NoError(t, err)
	again, err := domain.ParseDefinition(doc)
	require.NoError(t, err)
	assert.True(t, w.Equal(again))

	forever, err := domain.ParseDefinition([]byte(`{"name":"w",` + retentionSteps + `}`))
	require.NoError(t, err)
	assert.Zero(t, forever.Retention, "by default finished tasks are kept forever")
	assert.False(t, forever.Equal(w), "a new retention is a new version of the workflow")
	plain, err := forever.MarshalDefinition()
	require.NoError(t, err)
	assert.NotContains(t, string(plain), "retention", "a workflow without retention encodes as before retention existed")
}

func TestRetentionOfFinishedTasksIsValidated(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{`"30s"`, "must be at least 1m0s"},
		{`"-1h"`, "must be at least 1m0s"},
		{`"100000h"`, "must be at most 87600h0m0s"},
		{`"a day"`, "is not a duration"},
		{`3600`, "must be a duration"},
	} {
		_, err := domain.ParseDefinition([]byte(`{"name":"w","retention":{"finishedTasks":` + tc.value + `},` + retentionSteps + `}`))
		require.Error(t, err, tc.value)
		problems := domain.ProblemsOf(err)
		require.Len(t, problems, 1, tc.value)
		assert.Equal(t, "retention.finishedTasks", problems[0].Path)
		assert.Contains(t, problems[0].Message, tc.want)
	}
	_, err := domain.ParseDefinition([]byte(`{"name":"w","retention":{"finished":"1h"},` + retentionSteps + `}`))
	require.Error(t, err)
	assert.Equal(t, "retention.finished", domain.ProblemsOf(err)[0].Path)
}

func TestFinishedTaskMaxAgeKeepsTheWholeHistoryForTheRetention(t *testing.T) {
	submitted := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := domain.Retention{FinishedTasks: time.Hour}
	age, ok := r.FinishedTaskMaxAge(submitted, submitted.Add(2*time.Hour+300*time.Millisecond))
	require.True(t, ok)
	assert.Equal(t, 3*time.Hour+time.Second, age, "the task's first event expires an hour after its end; whole seconds, rounded up")

	age, ok = r.FinishedTaskMaxAge(submitted, submitted.Add(-time.Second))
	require.True(t, ok)
	assert.Equal(t, time.Hour, age, "a clock that went back never shortens the retention")

	_, ok = domain.Retention{}.FinishedTaskMaxAge(submitted, submitted)
	assert.False(t, ok)
}

func TestTaskExpiredIsAlsoNotFound(t *testing.T) {
	err := domain.TaskExpiredError("t1", 7)
	assert.True(t, errors.Is(err, domain.ErrTaskExpired))
	assert.True(t, errors.Is(err, domain.ErrTaskNotFound))
	assert.Contains(t, err.Error(), "revision 7")

	assert.False(t, domain.HistoryExpired(nil))
	assert.False(t, domain.HistoryExpired([]domain.RecordedEvent{{Revision: 0}, {Revision: 1}}))
	assert.True(t, domain.HistoryExpired([]domain.RecordedEvent{{Revision: 3}}))
}
