package kafka_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
	"github.com/sagaengine/saga/processes/agentruntime"
)

// TestAgentInstanceAnnouncesItselfAndLeaves runs an agent instance on the
// embedded broker: saga.agents is compacted; the instance's heartbeats,
// keyed by instance and typed, list the partitions of its command topics;
// when it stops it says so, then leaves a tombstone under its key.
func TestAgentInstanceAnnouncesItselfAndLeaves(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 2, Topics: protocol.CommandTopics("payment"),
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	client := newClient(t, b)
	ctx := testContext(t)

	producer := kafka.NewProducer(client, "saga/agent/payment", nil)
	ag := &agentruntime.Agent{Name: "payment", Instance: "host-1/payment", Capacity: 4, Clock: processes.SystemClock, Logger: slog.New(slog.DiscardHandler),
		Replies: producer, DeadLetters: producer, Heartbeats: kafka.NewHeartbeats(client, "saga/agent/payment"), HeartbeatEvery: 100 * time.Millisecond,
		RateLimit: &protocol.RateLimit{Calls: 50, PeriodMillis: 1000}, GlobalLimit: 20,
		Handler: func(context.Context, protocol.ExecuteStep) (json.RawMessage, error) { return nil, nil }}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() {
		stopped <- ag.Run(runCtx, func(ctx context.Context) error {
			return kafka.Consume(ctx, kafka.ConsumerConfig{Brokers: b.Addrs(), Group: "saga-agent-payment", Topics: protocol.CommandTopics("payment"),
				Logger: slog.New(slog.DiscardHandler), OnAssigned: ag.Assigned, OnRevoked: ag.Revoked}, ag.HandleCommand)
		})
	}()

	reader, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics(protocol.AgentsTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(reader.Close)
	next := func() *kgo.Record {
		t.Helper()
		for {
			fetches := reader.PollRecords(ctx, 1)
			require.NoError(t, ctx.Err(), "no record on saga.agents")
			if recs := fetches.Records(); len(recs) > 0 {
				return recs[0]
			}
		}
	}
	var hb protocol.AgentHeartbeat
	for {
		rec := next()
		assert.Equal(t, "host-1/payment", string(rec.Key))
		require.NotNil(t, rec.Value)
		assert.Contains(t, rec.Headers, kgo.RecordHeader{Key: kafka.HeaderType, Value: []byte(protocol.AgentHeartbeatMessageType)})
		hb, err = protocol.ParseAgentHeartbeat(rec.Value)
		require.NoError(t, err)
		if len(hb.Partitions) == 3 {
			break
		}
	}
	for _, topic := range protocol.CommandTopics("payment") {
		assert.Equal(t, []int32{0, 1}, hb.Partitions[topic], topic)
	}
	assert.Equal(t, "compact", cleanupPolicy(t, kadm.NewClient(client), protocol.AgentsTopic), "the first heartbeat created saga.agents compacted")
	assert.Equal(t, "payment", hb.Agent)
	assert.Equal(t, protocol.HealthHealthy, hb.Health)
	assert.Equal(t, 4, hb.Capacity)
	assert.Equal(t, 20, hb.GlobalLimit)
	assert.Equal(t, &protocol.RateLimit{Calls: 50, PeriodMillis: 1000}, hb.RateLimit)
	assert.Equal(t, hb.At.Add(300*time.Millisecond), hb.ExpiresAt, "three intervals")
	assert.EqualValues(t, 100, hb.IntervalMillis)
	assert.False(t, hb.StartedAt.After(hb.At))

	stop()
	require.NoError(t, <-stopped)
	var healths []string
	for {
		rec := next()
		require.Equal(t, "host-1/payment", string(rec.Key))
		if rec.Value == nil {
			break // the tombstone
		}
		hb, err = protocol.ParseAgentHeartbeat(rec.Value)
		require.NoError(t, err)
		healths = append(healths, hb.Health)
	}
	assert.True(t, slices.Contains(healths, protocol.HealthStopping), "stopping while it drains: %v", healths)
	assert.Equal(t, protocol.HealthStopping, healths[len(healths)-1])
}

// cleanupPolicy is a topic's cleanup.policy.
func cleanupPolicy(t *testing.T, adm *kadm.Client, topic string) string {
	t.Helper()
	configs, err := adm.DescribeTopicConfigs(testContext(t), topic)
	require.NoError(t, err)
	rc, err := configs.On(topic, nil)
	require.NoError(t, err)
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" {
			return c.MaybeValue()
		}
	}
	return ""
}
