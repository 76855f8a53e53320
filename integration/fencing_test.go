package integration_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// timeoutTerms returns the lease term and detector of every StepTimedOut
// of a task's stream.
func timeoutTerms(t *testing.T, events []domain.RecordedEvent) (terms []int64, by []string) {
	t.Helper()
	for i := range events {
		e, err := events[i].Decode()
		require.NoError(t, err)
		if to, ok := e.(domain.StepTimedOut); ok {
			terms, by = append(terms, to.LeaseTerm), append(by, to.DetectedBy)
		}
	}
	return terms, by
}

// TestSupervisorTimeoutsCarryGrowingLeaseTerms runs the whole system with a
// hung service: every StepTimedOut carries the lease term of the
// supervisor that appended it, recorded in the lease terms stream under
// its actor and shown by the API as the task's leaseTerm, and after a restart of every process (the broker's consumer
// group included) the supervisor acts in a newer term.
func TestSupervisorTimeoutsCarryGrowingLeaseTerms(t *testing.T) {
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{fastWorkflow(300 * time.Millisecond)},
		Faults: faults("shipping", demo.Fault{Mode: demo.FaultHang, Rate: 1})})
	order := func(id string) (int64, string) {
		s.publish(id, []byte(`{"orderId":"`+id+`"}`))
		require.Equal(t, domain.StateCompensated, s.awaitTerminal([]string{id}, 30*time.Second)[id].State)
		terms, by := timeoutTerms(t, s.stream(id))
		require.Len(t, terms, 3, "three attempts timed out")
		for i := range terms {
			assert.Equal(t, terms[0], terms[i], "one leader throughout")
			assert.Equal(t, by[0], by[i])
		}
		s.awaitView(id, domain.StateCompensated)
		view, ok, err := s.app.Tasks.Get(ctx(t, 10*time.Second), id)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, terms[0], view.LeaseTerm, "the API shows the task's newest term")
		return terms[0], by[0]
	}
	before, beforeBy := order("fence-1")
	assert.Positive(t, before)
	s.restart()
	after, afterBy := order("fence-2")
	assert.Greater(t, after, before, "a newer term after the restart")

	recorded, err := s.app.Store.ReadStream(ctx(t, 10*time.Second), processes.LeaseTermsStream)
	require.NoError(t, err)
	began := map[int64]processes.LeaseTermBegan{}
	for i, r := range recorded {
		require.Equal(t, processes.LeaseTermBeganType, r.Type)
		var b processes.LeaseTermBegan
		require.NoError(t, json.Unmarshal(r.Data, &b))
		assert.EqualValues(t, i+1, b.Term, "terms are numbered 1, 2, ... in the stream")
		began[b.Term] = b
	}
	assert.Equal(t, beforeBy, began[before].Actor, "the term was begun by the supervisor that acted in it")
	assert.Equal(t, afterBy, began[after].Actor)
	assert.Equal(t, after, s.app.Supervisor.Stats().LeaseTerm)
}
