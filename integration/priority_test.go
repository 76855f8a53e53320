package integration_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestHighPriorityOrdersOvertakeABurstOfLowOnesAcrossARestart publishes a
// burst of low-priority orders (the workflow's default) and then a few
// high ones while their agent is down, restarts saga, and only then starts
// the agent: one slow call at a time (MaxInFlight 1), so that commands
// queue. The priorities come back from the event store (the scheduler
// re-sends the attempts in flight to their bands), and every high order
// finishes before every low one but the first the agent took (it started
// before it could see the others). An order with an invalid priority is
// dead-lettered with the reason, and the API lists tasks by priority.
func TestHighPriorityOrdersOvertakeABurstOfLowOnesAcrossARestart(t *testing.T) {
	slow := &domain.Workflow{Name: "slowjob", Priority: domain.PriorityLow, Steps: []domain.StepDefinition{{
		Name: "work", Agent: "slow", Budget: 2 * time.Minute, MaxAttempts: 1, Backoff: fastBackoff}}}
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{demo.Workflow(), slow}, ExternalAgents: []string{"slow"}})

	lows, highs := orderIDs("low", 12), orderIDs("high", 3)
	var recs []*kgo.Record
	for _, id := range lows {
		recs = append(recs, &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte(id), Value: fmt.Appendf(nil, `{"orderId":%q,"workflow":"slowjob"}`, id)})
	}
	for _, id := range highs {
		recs = append(recs, &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte(id), Value: fmt.Appendf(nil, `{"orderId":%q,"workflow":"slowjob","priority":"high"}`, id)})
	}
	recs = append(recs, &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte("bad-1"), Value: []byte(`{"orderId":"bad-1","workflow":"slowjob","priority":"urgent"}`)})
	client, err := kgo.NewClient(kgo.SeedBrokers(s.app.KafkaBrokers...))
	require.NoError(t, err)
	require.NoError(t, client.ProduceSync(ctx(t, 30*time.Second), recs...).FirstErr())
	client.Close() // before the restart moves the broker
	assert.Contains(t, s.deadLetters(1)["bad-1"], `priority at /priority must be high, normal or low, not "urgent"`)
	all := append(append([]string{}, lows...), highs...)
	s.awaitTasks(all, 60*time.Second, func(t *domain.Task) bool { return t.Step("work").Attempt == 1 })
	began := time.Now()
	s.restart()

	var mu sync.Mutex
	var handled []string
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(runCtx, agent.Config{Brokers: s.app.KafkaBrokers, Logger: testLogger(), MaxInFlight: 1, PriorityAging: time.Hour}, "slow",
			func(ctx context.Context, req agent.Request) (any, error) {
				mu.Lock()
				handled = append(handled, req.TaskID)
				first := len(handled) == 1
				mu.Unlock()
				if first {
					time.Sleep(300 * time.Millisecond) // every band is fetched meanwhile
				}
				time.Sleep(10 * time.Millisecond) // a slow service
				return nil, nil
			})
	}()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })

	tasks := s.awaitTerminal(all, 90*time.Second)
	t.Logf("restart to the last order finished: %v; %d calls", time.Since(began).Round(time.Millisecond), len(handled))
	for _, id := range highs {
		assert.Equal(t, domain.PriorityHigh, tasks[id].Priority, id)
	}
	for _, id := range lows {
		assert.Equal(t, domain.PriorityLow, tasks[id].Priority, id)
	}

	mu.Lock()
	firstCall := map[string]int{}
	for i, id := range handled {
		if _, seen := firstCall[id]; !seen {
			firstCall[id] = i
		}
	}
	mu.Unlock()
	for _, high := range highs {
		for _, low := range lows {
			if firstCall[low] == 0 {
				continue // the agent's very first call
			}
			assert.Less(t, firstCall[high], firstCall[low], "high %s is handled before low %s (calls: %v)", high, low, handled)
		}
	}

	require.Eventually(t, func() bool {
		status, out := s.api(http.MethodGet, "/api/tasks?priority=high", nil)
		return status == http.StatusOK && out["count"] == float64(len(highs))
	}, 10*time.Second, 20*time.Millisecond, "the API lists the high tasks")
}
