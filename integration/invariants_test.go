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

// checkGraph asserts the invariants of a task of workflow wf along its
// graph of steps (issue 26):
//   - no step is dispatched before every step it waits for succeeded or
//     was skipped, nor once the task compensates (but for a retry of a
//     step in doubt, which is not made: abandoned steps are not tried
//     again);
//   - a skipped step is never dispatched and never compensated;
//   - only a step that succeeded or is in doubt is compensated, one at a
//     time, and the steps in reverse order of completion.
func checkGraph(t *testing.T, id string, wf *domain.Workflow, events []domain.RecordedEvent) {
	t.Helper()
	task := domain.NewTask(id)
	var lastEnded int64 = -1
	compensating := ""
	for i, r := range events {
		ev, err := domain.DecodeEvent(r.Type, r.Data)
		if !assert.NoError(t, err) {
			return
		}
		switch e := ev.(type) {
		case domain.StepDispatched:
			s := task.Step(e.Step)
			assert.False(t, task.Compensating, "%s: %s dispatched while compensating, at revision %d", id, e.Step, i)
			assert.NotEqual(t, domain.StepStateSkipped, s.State, "%s: skipped step %s dispatched", id, e.Step)
			for j := range wf.Steps {
				if wf.Steps[j].Name != e.Step {
					continue
				}
				for _, p := range wf.Predecessors(j) {
					st := task.Step(p).State
					assert.True(t, st == domain.StepStateProcessed || st == domain.StepStateSkipped,
						"%s: %s dispatched at revision %d while %s, which it waits for, is %s", id, e.Step, i, p, st)
				}
			}
		case domain.CompensationDispatched:
			s := task.Step(e.Step)
			assert.NotEqual(t, domain.StepStateSkipped, s.State, "%s: skipped step %s compensated", id, e.Step)
			assert.True(t, s.State == domain.StepStateProcessed || s.State == domain.StepStateCompensating ||
				(s.Attempt > 0 && s.LastFailure != domain.FailurePermanent),
				"%s: %s compensated at revision %d, though it neither succeeded nor is in doubt (%s)", id, e.Step, i, s.State)
			assert.True(t, compensating == "" || compensating == e.Step, "%s: %s compensated while %s is", id, e.Step, compensating)
			if compensating == "" && s.State != domain.StepStateCompensating {
				assert.True(t, lastEnded < 0 || s.Ended < lastEnded, "%s: %s compensated out of reverse order of completion", id, e.Step)
				lastEnded = s.Ended
			}
			for _, other := range task.Steps {
				assert.False(t, other.InFlight(), "%s: %s compensated while %s is in flight", id, e.Step, other.Name)
			}
			compensating = e.Step
		case domain.StepCompensated:
			compensating = ""
		}
		task.Apply(ev)
	}
}
