package projections_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections"
	"github.com/sagaengine/saga/projections/audittest"
)

// TestAuditShowsTheLeaseTermOfATimeout: a timeout recorded in a lease term
// says so in the audit, and the task's view carries its newest term; one
// recorded before terms reads as it did.
func TestAuditShowsTheLeaseTermOfATimeout(t *testing.T) {
	history := audittest.History()
	var timeouts []int
	for i, r := range history {
		if r.Type == domain.StepTimedOutType {
			timeouts = append(timeouts, i)
		}
	}
	require.NotEmpty(t, timeouts)
	last := timeouts[len(timeouts)-1]
	e, err := history[last].Decode()
	require.NoError(t, err)
	timedOut := e.(domain.StepTimedOut)
	timedOut.LeaseTerm = 4
	history[last].Data, err = domain.EncodeEvent(timedOut)
	require.NoError(t, err)
	history[last].Decoded = nil

	a, err := projections.BuildAudit("o-1", history, projections.Cut{})
	require.NoError(t, err)
	assert.Contains(t, a.Rows[last].Details, "detected by supervisor/b in lease term 4")
	assert.NotContains(t, a.Rows[timeouts[0]].Details, "lease term")
	assert.EqualValues(t, 4, a.State.LeaseTerm)
}
