package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestCapacityBoundsTheCallsAtOnce sends an agent of capacity 3 twenty
// commands at once: the service never sees more than three calls, every
// reply names the instance and counts one try, and the heartbeat and the
// metrics say so.
func TestCapacityBoundsTheCallsAtOnce(t *testing.T) {
	topics := append(protocol.CommandTopics("worker"), protocol.RepliesTopic, protocol.AgentsTopic, protocol.DeadLetterTopic)
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 2, Topics: topics, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var now, top atomic.Int64
	handler := func(ctx context.Context, req agent.Request) (any, error) {
		n := now.Add(1)
		defer now.Add(-1)
		for t := top.Load(); n > t && !top.CompareAndSwap(t, n); t = top.Load() {
		}
		select { // a call that takes a while, so that calls overlap
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
		}
		return map[string]string{"task": req.TaskID}, nil
	}
	a, err := agent.New("worker", handler, agent.Config{Brokers: b.Addrs(), Capacity: 3, Instance: "w-1/worker",
		HeartbeatEvery: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- a.Run(runCtx) }()

	client, err := kafka.NewClient(b.Addrs())
	require.NoError(t, err)
	defer client.Close()
	producer := kafka.NewProducer(client, "test", nil)
	const n = 20
	for i := range n {
		require.NoError(t, producer.SendCommand(ctx, protocol.ExecuteStep{TaskID: fmt.Sprintf("t-%d", i), Workflow: "w", Step: "s", Agent: "worker",
			Action: protocol.ActionExecute, Attempt: 1, CompleteBy: time.Now().Add(30 * time.Second), IdempotencyKey: fmt.Sprintf("t-%d/s", i),
			Priority: domain.Priorities()[i%3]}))
	}
	require.NoError(t, client.Flush(ctx))

	reader, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics(protocol.RepliesTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer reader.Close()
	replies := map[string]protocol.StepReply{}
	for len(replies) < n {
		fetches := reader.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "replies: %d of %d", len(replies), n)
		fetches.EachRecord(func(r *kgo.Record) {
			reply, err := protocol.ParseStepReply(r.Value)
			require.NoError(t, err)
			replies[reply.TaskID] = reply
		})
	}
	for _, r := range replies {
		assert.Equal(t, protocol.OutcomeSucceeded, r.Outcome)
		assert.Equal(t, 1, r.Tries)
		assert.Equal(t, "w-1/worker", r.Instance)
	}
	assert.LessOrEqual(t, top.Load(), int64(3), "never more calls at once than the capacity")
	assert.GreaterOrEqual(t, top.Load(), int64(2), "calls overlapped")
	// The counters move once the broker has a reply: the reader may see it
	// first.
	require.Eventually(t, func() bool { return a.Stats().Succeeded == n }, 10*time.Second, time.Millisecond)
	hb := a.Heartbeat()
	assert.Equal(t, 3, hb.Capacity)
	assert.EqualValues(t, n, hb.Succeeded)
	assert.EqualValues(t, n, hb.Tries)
	var metrics bytes.Buffer
	a.WriteMetrics(&metrics)
	assert.Contains(t, metrics.String(), `saga_agent_tries_total{agent="worker"} 20`)
	assert.Contains(t, metrics.String(), `saga_agent_commands_total{agent="worker",outcome="unavailable"} 0`)

	stop()
	require.NoError(t, <-stopped)
}
