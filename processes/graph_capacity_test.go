package processes_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// TestSideBySideStepsShareTheirAgentsRoom (issue 26): two steps of one
// task that may run side by side on an agent with room for one are not
// both dispatched: the second waits, and goes once the first answers;
// both are in flight at once where there is room for two.
func TestSideBySideStepsShareTheirAgentsRoom(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	step := func(name string) domain.StepDefinition {
		return domain.StepDefinition{Name: name, Agent: "worker", Budget: 10 * time.Second, MaxAttempts: 1, After: []string{},
			Backoff: domain.Backoff{Initial: 300 * time.Millisecond, Multiplier: 2, Max: time.Second}}
	}
	wf := &domain.Workflow{Name: "pair", Version: 1, Steps: []domain.StepDefinition{step("left"), step("right")}}
	require.NoError(t, wf.Validate())
	for _, room := range []int{1, 2} {
		store := embeddedStore(t)
		dir := &directory{}
		dir.set(worker("w-1", protocol.HealthHealthy, room, 0, start))
		history{t: t, store: store, now: start}.task("pair-1", wf, false)
		rec := &holdingAgent{}
		s := &processes.Scheduler{Store: store, Commands: rec, DeadLetters: dropLetters{}, Workflows: workflows{"pair": wf},
			Actor: "scheduler/test", Clock: newFakeClock(start), Logger: quiet(), Shards: 1, Agents: dir, Router: dir}
		run(t, s.Run)
		<-s.Ready()
		first := rec.await(t, 1)
		if room == 2 {
			sent := rec.await(t, 2)
			assert.ElementsMatch(t, []string{"left", "right"}, []string{sent[0].Step, sent[1].Step}, "room for both: both go at once")
			continue
		}
		require.Eventually(t, func() bool { return count(eventTypes(t, store, "pair-1"), domain.StepWaitingType) == 1 },
			10*time.Second, 5*time.Millisecond, "the second step records that it waits")
		assert.Len(t, rec.commands(), 1, "no more in flight than the agent takes")
		answer(t, s, first[0], protocol.OutcomeSucceeded, "")
		second := rec.await(t, 2)[1]
		assert.NotEqual(t, first[0].Step, second.Step, "the waiting step goes once room frees")
		answer(t, s, second, protocol.OutcomeSucceeded, "")
		require.Eventually(t, func() bool { return count(eventTypes(t, store, "pair-1"), domain.TaskProcessedType) == 1 },
			10*time.Second, 5*time.Millisecond)
	}
}
