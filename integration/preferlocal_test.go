package integration_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestPreferLocalAgentsKeepsCommandsInTheProcess runs the whole system
// with PreferLocalAgents and a second payment instance outside it with as
// much room as the system's own. Without the preference the scheduler
// shares the payment steps between the two by load; with it, every step
// goes to the system's own instance, which never fills up here, so no
// command and no reply crosses Kafka and the instance elsewhere is never
// called.
func TestPreferLocalAgentsKeepsCommandsInTheProcess(t *testing.T) {
	here := demo.NewService("payment-here", testLogger())
	here.Latency = 20 * time.Millisecond
	require.NoError(t, here.Start("127.0.0.1:0"))
	t.Cleanup(func() { _ = here.Close() })
	s := startSystem(t, engine.Config{Instance: "node-1", DemoServiceURLs: map[string]string{"payment": here.URL()},
		AgentInstances: engine.AgentInstances{Capacity: map[string]int{"payment": 64}}, PreferLocalAgents: true})

	var calls atomic.Int64
	other, err := agent.New("payment", func(context.Context, agent.Request) (any, error) {
		calls.Add(1)
		return map[string]string{"paymentId": "elsewhere"}, nil
	}, agent.Config{Brokers: s.app.KafkaBrokers, Instance: "elsewhere/payment", Capacity: 64, Logger: testLogger()})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = other.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-stopped })
	require.Eventually(t, func() bool {
		n := 0
		for _, hb := range s.app.AgentDirectory.Instances("payment", time.Now()) {
			if len(hb.Partitions) > 0 {
				n++
			}
		}
		return n == 2
	}, 30*time.Second, 20*time.Millisecond, "both payment instances announce their partitions")

	ids := orderIDs("prefer", 24)
	s.publishOrders(ids)
	tasks := s.awaitTerminal(ids, 60*time.Second)
	for _, id := range ids {
		require.Equal(t, domain.StateProcessed, tasks[id].State, id)
		assert.Equal(t, "node-1/payment", tasks[id].Step("charge-payment").Instance, id)
	}
	assert.Zero(t, calls.Load(), "the instance elsewhere was never called")
	assert.Zero(t, s.recordsOn(protocol.CommandTopics("payment")...), "no payment command went through Kafka")
	assert.Zero(t, s.recordsOn(protocol.RepliesTopic), "no reply went through Kafka")
}
