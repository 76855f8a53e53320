package integration_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/processes"
)

// TestHeldStateDoesNotGrowWithFinishedOrders runs N orders and then 10N
// more, and compares what the processes hold in memory once each batch has
// finished (App.Held, exported as saga_held_entries): what follows work in
// flight is back to nothing, and what is capped stays within its cap. A
// structure that grew with history, as the supervisor's deadline index did
// with every attempt of the last budget, fails here by count, not by a
// timing, however busy the machine.
func TestHeldStateDoesNotGrowWithFinishedOrders(t *testing.T) {
	s := startSystem(t, engine.Config{})
	const n = 150
	run := func(name string, count int) map[string]processes.Held {
		ids := orderIDs(name, count)
		s.publishOrders(ids)
		s.awaitTerminal(ids, 2*time.Minute)
		// The followers see the final events just after the store does.
		var held map[string]processes.Held
		require.Eventually(t, func() bool {
			held = s.app.Held()
			return held["scheduler"]["tasks"] == 0 && held["supervisor"]["tasks"] == 0 && held["status"]["tasks"] == 0
		}, 30*time.Second, 20*time.Millisecond, "every process lets go of the finished tasks: %v", held)
		return held
	}
	small := run("held-small", n)
	large := run("held-large", 10*n)
	t.Logf("held after %d orders: %v; after %d more: %v", n, small, 10*n, large)

	for _, h := range []map[string]processes.Held{small, large} {
		for _, structure := range []string{"tasks", "inflight", "waiting", "wakes", "unsure"} {
			assert.Zero(t, h["scheduler"][structure], "scheduler %s once idle", structure)
		}
		for _, structure := range []string{"tasks", "failed", "alerted", "unsure"} {
			assert.Zero(t, h["supervisor"][structure], "supervisor %s once idle", structure)
		}
		assert.Zero(t, h["status"]["tasks"], "status publisher tasks once idle")
	}
	// The deadline index may keep what is not yet due, but never more than
	// its pruning threshold once most of what it holds is finished: 10N
	// orders indexed 30N deadlines.
	assert.LessOrEqual(t, large["supervisor"]["deadlines"], 1024, "deadlines of finished tasks are pruned")
	// Finished tasks remembered and stream states cached are capped (256 a
	// shard, 65,536): at most what the orders made, and within the caps.
	assert.LessOrEqual(t, large["scheduler"]["finished"], min(11*n, 256*256))
	assert.LessOrEqual(t, large["eventstore"]["stream_states"], 1<<16)
	assert.NotEmpty(t, s.metric(fmt.Sprintf("saga_held_entries{process=%q,structure=%q}", "supervisor", "deadlines")),
		"the held figures are exported")
}
