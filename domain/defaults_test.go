package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

// TestAWorkflowBuiltInGoTakesTheFilesDefaults: a step given as a Go value
// with only a name and an agent means what the same step in a file means.
func TestAWorkflowBuiltInGoTakesTheFilesDefaults(t *testing.T) {
	fromFile, err := domain.ParseDefinition([]byte(`{"name":"signup","steps":[
		{"name":"create-account","agent":"accounts","compensation":{"budget":"3s"}},
		{"name":"send-welcome","agent":"mail","budget":"2s","backoff":{"initial":"1s","multiplier":3,"max":"9s","jitter":0}}]}`))
	require.NoError(t, err)
	inGo := &domain.Workflow{Name: "signup", Steps: []domain.StepDefinition{
		{Name: "create-account", Agent: "accounts", Compensation: &domain.CompensationDefinition{Budget: 3 * time.Second}},
		{Name: "send-welcome", Agent: "mail", Budget: 2 * time.Second, Backoff: domain.Backoff{Initial: time.Second, Multiplier: 3, Max: 9 * time.Second}},
	}}
	require.Error(t, inGo.Validate(), "without defaults a zero budget is refused")
	filled := inGo.WithDefaults()
	require.NoError(t, filled.Validate())
	assert.True(t, filled.Equal(fromFile), "a Go value takes the defaults a file takes")
	assert.Equal(t, domain.DefaultStepBudget, filled.Steps[0].Budget)
	assert.Equal(t, domain.DefaultStepAttempts, filled.Steps[0].MaxAttempts)
	assert.Equal(t, domain.DefaultBackoff, filled.Steps[0].Backoff)
	assert.Equal(t, domain.DefaultCompensationAttempts, filled.Steps[0].Compensation.MaxAttempts)
	assert.Equal(t, "undo-create-account", filled.Steps[0].Compensation.Action)
	assert.Zero(t, inGo.Steps[0].Budget, "WithDefaults leaves its receiver alone")
	assert.Equal(t, domain.DefaultCompensationAttempts, domain.DefaultCompensationAttemps, "the old name stays")
}

// TestAMultiplierBelowOneIsRefusedInBothForms: a multiplier of 0 is refused
// as 0.5 is, in a file and in Go; only the zero Backoff means the default.
func TestAMultiplierBelowOneIsRefusedInBothForms(t *testing.T) {
	for _, m := range []string{"0", "0.5"} {
		_, err := domain.ParseDefinition([]byte(`{"name":"w","steps":[{"name":"a","agent":"x","backoff":{"multiplier":` + m + `}}]}`))
		require.ErrorIs(t, err, domain.ErrInvalidWorkflow, m)
		assert.Contains(t, err.Error(), "steps[0].backoff.multiplier: must be at least 1, not "+m)
	}
	inGo := &domain.Workflow{Name: "w", Steps: []domain.StepDefinition{{Name: "a", Agent: "x", Backoff: domain.Backoff{Initial: time.Second}}}}
	err := inGo.WithDefaults().Validate()
	require.ErrorIs(t, err, domain.ErrInvalidWorkflow)
	assert.Contains(t, err.Error(), "steps[0].backoff.multiplier: must be at least 1, not 0")
}
