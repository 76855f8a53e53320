package integration_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/workflowfile"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// heldWorkflow parses a workflow for the held-state test.
func heldWorkflow(t *testing.T, yaml string) *domain.Workflow {
	t.Helper()
	w, err := workflowfile.Parse("held.yaml", []byte(yaml))
	require.NoError(t, err)
	return w
}

// produce writes a record to topic for each key, with body(key).
func (s *system) produce(topic string, keys []string, body func(key string) string) {
	s.t.Helper()
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte(body(k))}
	}
	require.NoError(s.t, s.producer().ProduceSync(ctx(s.t, 30*time.Second), recs...).FirstErr())
}

// TestHeldStateWithAwaitsAndDelays is TestHeldStateDoesNotGrowWithFinishedOrders
// with await and delay steps: with K tasks waiting on an await and K on a
// long delay, it runs N orders that delay a moment and then await their
// payment event (half published before the order, half after), and then
// 10N more. Once each batch has finished, what the processes hold is what
// the 2K waiting tasks need, the same after N and 10N: the scheduler's
// tasks and the marks of their waits it knows ("awaits"), the
// supervisor's tasks and delay timers, the status publisher's tasks.
// Finished awaits and delays leave nothing behind (the awaiter keeps no
// state per task: its index is the inbox in the store), and the deadlines
// of finished awaits are pruned as those of attempts are.
func TestHeldStateWithAwaitsAndDelays(t *testing.T) {
	s := startSystem(t, engine.Config{})
	s.register(heldWorkflow(t, `
name: held-await
steps:
  - {name: cool-off, delay: {for: 10ms}}
  - name: captured
    await: {topic: shop.payments, typeField: /type, correlate: /orderId, value: "{{ order.orderId }}", succeedOn: [PaymentCaptured]}
    budget: 10m
`))
	s.register(heldWorkflow(t, `
name: held-delay
steps:
  - {name: cool-off, delay: {for: 1h}}
`))
	order := func(workflow string) func(string) string {
		return func(id string) string { return `{"orderId":"` + id + `","workflow":"` + workflow + `"}` }
	}
	payment := func(id string) string { return `{"type":"PaymentCaptured","orderId":"` + id + `"}` }

	const k, n = 20, 100
	awaiting, delayed := orderIDs("held-awaiting", k), orderIDs("held-delayed", k)
	s.produce(protocol.OrdersTopic, awaiting, order("held-await"))
	s.produce(protocol.OrdersTopic, delayed, order("held-delay"))
	waitsIn := func(state domain.StepState, step string) func(*domain.Task) bool {
		return func(t *domain.Task) bool { return t.Step(step) != nil && t.Step(step).State == state }
	}
	s.awaitTasks(awaiting, 2*time.Minute, waitsIn(domain.StepStateAwaiting, "captured"))
	s.awaitTasks(delayed, 2*time.Minute, waitsIn(domain.StepStateDelayed, "cool-off"))

	run := func(name string, count int) map[string]processes.Held {
		ids := orderIDs(name, count)
		var early, late []string
		for i, id := range ids {
			if i%2 == 0 {
				early = append(early, id)
			} else {
				late = append(late, id)
			}
		}
		s.produce("shop.payments", early, payment)
		s.produce(protocol.OrdersTopic, ids, order("held-await"))
		s.produce("shop.payments", late, payment)
		tasks := s.awaitTerminal(ids, 3*time.Minute)
		for _, id := range ids {
			require.Equal(t, domain.StateProcessed, tasks[id].State, "%s: %s", id, tasks[id].Reason)
		}
		var held map[string]processes.Held
		if !assert.Eventually(t, func() bool {
			held = s.app.Held()
			return held["scheduler"]["tasks"] == 2*k && held["scheduler"]["awaits"] == k && held["supervisor"]["tasks"] == 2*k &&
				held["supervisor"]["timers"] == k && held["status"]["tasks"] == 2*k
		}, 30*time.Second, 20*time.Millisecond) {
			t.Fatalf("after %s, the processes hold more than the waiting tasks: %v", name, held)
		}
		return held
	}
	small := run("held-await-small", n)
	large := run("held-await-large", 10*n)
	t.Logf("held with %d tasks awaiting and %d delayed, after %d orders: %v; after %d more: %v", k, k, n, small, 10*n, large)

	for _, h := range []map[string]processes.Held{small, large} {
		for _, structure := range []string{"inflight", "waiting", "wakes", "unsure"} {
			assert.Zero(t, h["scheduler"][structure], "scheduler %s", structure)
		}
		for _, structure := range []string{"failed", "alerted", "unsure"} {
			assert.Zero(t, h["supervisor"][structure], "supervisor %s", structure)
		}
	}
	for _, structure := range []string{"tasks", "awaits"} {
		assert.Equal(t, small["scheduler"][structure], large["scheduler"][structure], "scheduler %s", structure)
	}
	for _, structure := range []string{"tasks", "timers"} {
		assert.Equal(t, small["supervisor"][structure], large["supervisor"][structure], "supervisor %s", structure)
	}
	// The deadlines of the awaits that finished are pruned as those of
	// attempts are: the waiting ones stay.
	assert.GreaterOrEqual(t, large["supervisor"]["deadlines"], k, "the waiting awaits' deadlines")
	assert.LessOrEqual(t, large["supervisor"]["deadlines"], 1024, "deadlines of finished awaits are pruned")
	assert.Equal(t, fmt.Sprint(11*n), s.metric(`saga_await_events_total{outcome="kept"}`), "every payment event was kept")
}
