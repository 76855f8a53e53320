package integration_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestSystemAgentsAnnounceThemselvesAndKeepToTheirCapacity runs sagad's
// demo agents with a capacity for payment: each agent instance announces
// itself on saga.agents under <instance>/<agent> with its capacity and
// partitions, the payment service never serves more calls at once than
// that, and replies carry the instance and the calls made.
func TestSystemAgentsAnnounceThemselvesAndKeepToTheirCapacity(t *testing.T) {
	s := startSystem(t, engine.Config{Instance: "node-1", AgentInstances: engine.AgentInstances{Capacity: map[string]int{"payment": 2}}})
	ids := orderIDs("cap", 40)
	s.publishOrders(ids)
	tasks := s.awaitTerminal(ids, 60*time.Second)
	for _, id := range ids {
		require.Equal(t, domain.StateProcessed, tasks[id].State, id)
	}
	assert.LessOrEqual(t, s.app.Services["payment"].PeakConcurrent(), 2)

	reader, err := kgo.NewClient(kgo.SeedBrokers(s.app.KafkaBrokers...), kgo.ConsumeTopics(protocol.AgentsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer reader.Close()
	c := ctx(t, 30*time.Second)
	seen := map[string]protocol.AgentHeartbeat{}
	for len(seen) < 3 || len(seen["node-1/payment"].Partitions) == 0 {
		fetches := reader.PollFetches(c)
		require.NoError(t, c.Err(), "heartbeats seen: %v", seen)
		fetches.EachRecord(func(r *kgo.Record) {
			hb, err := protocol.ParseAgentHeartbeat(r.Value)
			require.NoError(t, err)
			assert.Equal(t, string(r.Key), hb.Instance)
			if hb.Agent != domain.HTTPAgent {
				seen[hb.Instance] = hb
			}
		})
	}
	pay := seen["node-1/payment"]
	assert.Equal(t, "payment", pay.Agent)
	assert.Equal(t, 2, pay.Capacity)
	assert.Equal(t, protocol.HealthHealthy, pay.Health)
	assert.NotEmpty(t, pay.Partitions[protocol.CommandTopic("payment")])
	assert.Contains(t, seen, "node-1/inventory")
	assert.Contains(t, seen, "node-1/shipping")

	charge := tasks[ids[0]].Step("charge-payment")
	assert.Equal(t, "node-1/payment", charge.Instance)
	assert.Equal(t, 1, charge.Tries)
}

// TestSystemAgentRateLimitHoldsInEveryWindow gives payment a rate limit:
// however many orders arrive at once, the payment service never sees more
// calls start within any window of the period than the limit, and every
// order is still processed.
func TestSystemAgentRateLimitHoldsInEveryWindow(t *testing.T) {
	s := startSystem(t, engine.Config{AgentInstances: engine.AgentInstances{
		RateLimit: map[string]protocol.RateLimit{"payment": {Calls: 10, PeriodMillis: 300}}}})
	ids := orderIDs("rate", 40)
	s.publishOrders(ids)
	tasks := s.awaitTerminal(ids, 60*time.Second)
	for _, id := range ids {
		require.Equal(t, domain.StateProcessed, tasks[id].State, id)
	}
	pay := s.app.Services["payment"]
	assert.GreaterOrEqual(t, pay.Calls(), int64(40))
	assert.LessOrEqual(t, pay.MostCallsWithin(300*time.Millisecond), 10)
	hb := s.app.AgentProcs["payment"].Heartbeat()
	assert.Equal(t, &protocol.RateLimit{Calls: 10, PeriodMillis: 300}, hb.RateLimit)
	require.NotNil(t, s.app.AgentDirectory, "the agents' process reads the directory for its share")
}
