package projections_test

import (
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections"
	"github.com/sagaengine/saga/projections/audittest"
)

// TestAuditOfAnExpiredHistory: a task's history whose first events expired
// (its workflow's retention) is ErrTaskExpired, which is also
// ErrTaskNotFound, not a fold of what is left; one with no events left is
// not found.
func TestAuditOfAnExpiredHistory(t *testing.T) {
	history := audittest.History()
	_, err := projections.BuildAudit("o-1", history[3:], projections.Cut{})
	require.Error(t, err)
	assert.True(t, errors.Is(err, domain.ErrTaskExpired), "%v", err)
	assert.True(t, errors.Is(err, domain.ErrTaskNotFound), "%v", err)

	_, err = projections.BuildAudit("o-1", nil, projections.Cut{})
	assert.True(t, errors.Is(err, domain.ErrTaskNotFound), "%v", err)
	assert.False(t, errors.Is(err, domain.ErrTaskExpired), "%v", err)
}
