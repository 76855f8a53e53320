package integration_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/domain"
)

// checkStream asserts the invariants every task stream must keep:
//   - no attempt of a step or of a compensation is dispatched twice;
//   - no attempt times out twice;
//   - at most one final event (TaskProcessed, TaskCompensated) and nothing
//     after it;
//   - a compensated task undid its steps in reverse order.
func checkStream(t *testing.T, id string, events []domain.RecordedEvent) *domain.Task {
	t.Helper()
	task := domain.NewTask(id)
	seen := map[string]bool{}
	once := func(kind string, step string, attempt int) {
		key := fmt.Sprintf("%s/%s/%d", kind, step, attempt)
		assert.False(t, seen[key], "%s: %s twice", id, key)
		seen[key] = true
	}
	finals := 0
	var undone []int
	for i, r := range events {
		ev, err := domain.DecodeEvent(r.Type, r.Data)
		if !assert.NoError(t, err) {
			return task
		}
		if finals > 0 {
			assert.Fail(t, "transition after the final state", "%s: %s at revision %d", id, r.Type, i)
		}
		switch e := ev.(type) {
		case domain.StepDispatched:
			once("dispatch", e.Step, e.Attempt)
		case domain.CompensationDispatched:
			once("compensation", e.Step, e.Attempt)
		case domain.StepTimedOut:
			once(fmt.Sprintf("timeout-%v", e.Compensation), e.Step, e.Attempt)
		case domain.StepCompensated:
			for idx, s := range task.Steps {
				if s.Name == e.Step {
					undone = append(undone, idx)
				}
			}
		case domain.TaskProcessed, domain.TaskCompensated:
			finals++
		}
		task.Apply(ev)
	}
	if task.State == domain.StateCompensated {
		for i := 1; i < len(undone); i++ {
			assert.Greater(t, undone[i-1], undone[i], "%s: compensated out of reverse order: %v", id, undone)
		}
	}
	return task
}
