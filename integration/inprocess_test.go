package integration_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// recordsOn counts the records ever produced to topics.
func (s *system) recordsOn(topics ...string) int64 {
	s.t.Helper()
	client, err := kgo.NewClient(kgo.SeedBrokers(s.app.KafkaBrokers...))
	require.NoError(s.t, err)
	defer client.Close()
	ends, err := kadm.NewClient(client).ListEndOffsets(ctx(s.t, 10*time.Second), topics...)
	require.NoError(s.t, err)
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		require.NoError(s.t, o.Err)
		n += o.Offset
	})
	return n
}

// inProcessCommands reads how many commands the engine handed to its own
// agents, from /metrics.
func (s *system) inProcessCommands() float64 {
	s.t.Helper()
	f := scrape(s.t, "http://"+s.app.HTTPAddr+"/metrics")["saga_commands_in_process_total"]
	require.NotNil(s.t, f)
	return f.GetMetric()[0].GetCounter().GetValue()
}

// TestInProcessCommandsSkipKafkaAndShareWithInstancesElsewhere runs the
// whole system with its agents, and a second payment instance outside it
// (the Go SDK, in the test). Both payment instances have room for one call
// at a time, and calls take 50 ms, so the scheduler shares the payment
// steps between them. The steps routed to the system's own instances are
// handed over in process: the inventory and shipping command topics stay
// empty, and so does the replies topic but for the other instance's
// replies. The steps routed to the instance elsewhere go through Kafka as
// before, and every order is processed.
func TestInProcessCommandsSkipKafkaAndShareWithInstancesElsewhere(t *testing.T) {
	here := demo.NewService("payment-here", testLogger())
	here.Latency = 50 * time.Millisecond
	require.NoError(t, here.Start("127.0.0.1:0"))
	t.Cleanup(func() { _ = here.Close() })
	s := startSystem(t, engine.Config{Instance: "node-1", DemoServiceURLs: map[string]string{"payment": here.URL()},
		AgentInstances: engine.AgentInstances{Capacity: map[string]int{"payment": 1}}})

	var calls atomic.Int64
	other, err := agent.New("payment", func(ctx context.Context, req agent.Request) (any, error) {
		calls.Add(1)
		select { // the service's latency, as the one in the system
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return map[string]string{"paymentId": "elsewhere-" + req.IdempotencyKey}, nil
	}, agent.Config{Brokers: s.app.KafkaBrokers, Instance: "elsewhere/payment", Capacity: 1, Logger: testLogger()})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = other.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-stopped })
	announced := func(agent string) int {
		n := 0
		for _, hb := range s.app.AgentDirectory.Instances(agent, time.Now()) {
			if len(hb.Partitions) > 0 {
				n++
			}
		}
		return n
	}
	// Until an instance announces its partitions the scheduler cannot
	// route to it, and its commands go through Kafka by task id.
	require.Eventually(t, func() bool {
		return announced("payment") == 2 && announced("inventory") == 1 && announced("shipping") == 1
	},
		30*time.Second, 20*time.Millisecond, "every instance announces its partitions")

	ids := orderIDs("local", 24)
	s.publishOrders(ids)
	tasks := s.awaitTerminal(ids, 60*time.Second)
	byInstance := map[string]int{}
	for _, id := range ids {
		require.Equal(t, domain.StateProcessed, tasks[id].State, id)
		byInstance[tasks[id].Step("charge-payment").Instance]++
	}
	t.Logf("payment steps by instance: %v; calls elsewhere %d", byInstance, calls.Load())
	assert.Positive(t, byInstance["node-1/payment"], "the system's own instance took payment steps")
	assert.Positive(t, byInstance["elsewhere/payment"], "the instance elsewhere kept its share")
	assert.GreaterOrEqual(t, calls.Load(), int64(byInstance["elsewhere/payment"]))

	assert.Zero(t, s.recordsOn(protocol.CommandTopics("inventory")...), "inventory commands went in process")
	assert.Zero(t, s.recordsOn(protocol.CommandTopics("shipping")...), "shipping commands went in process")
	assert.GreaterOrEqual(t, s.recordsOn(protocol.CommandTopics("payment")...), int64(byInstance["elsewhere/payment"]),
		"commands for the instance elsewhere went through Kafka")
	st := other.Stats()
	assert.Equal(t, s.recordsOn(protocol.RepliesTopic), st.Succeeded+st.Failed+st.Returned, "only the instance elsewhere replied through Kafka")
	// At least: a re-sent command (after a rebalance of the scheduler's
	// group, say) counts again.
	assert.GreaterOrEqual(t, s.inProcessCommands(), float64(2*len(ids)+byInstance["node-1/payment"]))
}

// TestCommandsThroughKafkaWhenAsked: with CommandsThroughKafka, every
// command and reply goes through Kafka, as before in-process commands.
func TestCommandsThroughKafkaWhenAsked(t *testing.T) {
	s := startSystem(t, engine.Config{CommandsThroughKafka: true})
	ids := orderIDs("through", 5)
	s.publishOrders(ids)
	tasks := s.awaitTerminal(ids, 60*time.Second)
	for _, id := range ids {
		require.Equal(t, domain.StateProcessed, tasks[id].State, id)
	}
	assert.GreaterOrEqual(t, s.recordsOn(protocol.CommandTopics("inventory")...), int64(len(ids)))
	assert.GreaterOrEqual(t, s.recordsOn(protocol.RepliesTopic), int64(3*len(ids)))
	assert.Zero(t, s.inProcessCommands())
}

// TestAPanickingHandlerFailsItsStepAndNothingElse: an embedding program's
// payment handler panics on every command. Each order's payment step fails
// for good, naming the panic, and the order compensates; the process, its
// other agents and the following orders go on.
func TestAPanickingHandlerFailsItsStepAndNothingElse(t *testing.T) {
	var calls atomic.Int64
	s := startSystem(t, engine.Config{Agents: map[string]agent.Handler{"payment": func(context.Context, agent.Request) (any, error) {
		calls.Add(1)
		var m map[string]int
		m["boom"]++ // a nil map: the handler panics
		return nil, nil
	}}})
	ids := orderIDs("panic", 3)
	s.publishOrders(ids)
	tasks := s.awaitTerminal(ids, 60*time.Second)
	for _, id := range ids {
		require.Equal(t, domain.StateCompensated, tasks[id].State, id)
		pay := tasks[id].Step("charge-payment")
		assert.Contains(t, pay.LastError, "the handler panicked", id)
	}
	assert.EqualValues(t, len(ids), calls.Load(), "one call per order: a panic is not retried")
}
