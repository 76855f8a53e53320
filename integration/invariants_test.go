package integration_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/integration/invariants"
)

// checkStream asserts the invariants every task stream must keep
// (invariants.Stream): no attempt dispatched or timed out twice, nothing
// after the final state, compensations in reverse order.
func checkStream(t *testing.T, id string, events []domain.RecordedEvent) *domain.Task {
	t.Helper()
	task, problems := invariants.Stream(id, events)
	for _, p := range problems {
		assert.Fail(t, "invariant violated", p)
	}
	return task
}
