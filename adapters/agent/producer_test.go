package agent_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestAgentsShareALentProducer runs two agents on one producer client they
// are lent: both reply through it, and it still produces after both have
// stopped, since the agents do not close what they did not open.
func TestAgentsShareALentProducer(t *testing.T) {
	topics := append(append(protocol.CommandTopics("alpha"), protocol.CommandTopics("beta")...), protocol.RepliesTopic, protocol.AgentsTopic,
		protocol.DeadLetterTopic)
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 1, Topics: topics, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	shared, err := kafka.NewClient(b.Addrs())
	require.NoError(t, err)
	defer shared.Close()
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 2)
	for _, name := range []string{"alpha", "beta"} {
		a, err := agent.New(name, func(context.Context, agent.Request) (any, error) { return map[string]string{"by": name}, nil },
			agent.Config{Brokers: b.Addrs(), Producer: shared, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		go func() { stopped <- a.Run(runCtx) }()
	}

	producer := kafka.NewProducer(shared, "test", nil)
	for _, name := range []string{"alpha", "beta"} {
		require.NoError(t, producer.SendCommand(ctx, protocol.ExecuteStep{TaskID: "t-" + name, Workflow: "w", Step: "s", Agent: name,
			Action: protocol.ActionExecute, Attempt: 1, CompleteBy: time.Now().Add(30 * time.Second), IdempotencyKey: "t-" + name + "/s"}))
	}
	reader, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics(protocol.RepliesTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer reader.Close()
	agents := map[string]bool{}
	for len(agents) < 2 {
		fetches := reader.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "replies from %v", agents)
		fetches.EachRecord(func(r *kgo.Record) {
			reply, err := protocol.ParseStepReply(r.Value)
			require.NoError(t, err)
			require.Equal(t, protocol.OutcomeSucceeded, reply.Outcome)
			agents[reply.Agent] = true
		})
	}

	stop()
	require.NoError(t, <-stopped)
	require.NoError(t, <-stopped)
	require.NoError(t, shared.ProduceSync(ctx, &kgo.Record{Topic: protocol.DeadLetterTopic, Value: []byte("{}")}).FirstErr(),
		"the lent client was closed by an agent")
}
