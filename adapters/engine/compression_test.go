package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/adapters/kafka/kafkatest"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestValidateRefusesAnUnknownKafkaCompression: a codec name CompressionOpt
// does not know is a configuration problem that names the setting and what
// it accepts; auto, the empty string and every codec name are accepted.
func TestValidateRefusesAnUnknownKafkaCompression(t *testing.T) {
	err := (&engine.Config{DataDir: t.TempDir(), KafkaCompression: "brotli"}).Validate()
	require.ErrorIs(t, err, engine.ErrInvalidConfig)
	require.ErrorIs(t, err, kafka.ErrUnknownCompression)
	assert.ErrorContains(t, err, `KafkaCompression: unknown Kafka compression "brotli": want one of none, snappy, lz4, zstd, gzip, or auto`)
	for _, name := range append([]string{"", engine.KafkaCompressionAuto}, kafka.CompressionNames...) {
		assert.NoError(t, (&engine.Config{DataDir: t.TempDir(), KafkaCompression: name}).Validate(), name)
	}
}

// TestEngineProducesUncompressedToTheEmbeddedBroker runs an order whose
// step returns a compressible result, commands and replies through Kafka,
// then reads the raw record batches the engine wrote (statuses, replies,
// commands, heartbeats): with the embedded broker and auto none of them is
// compressed; KafkaCompression snappy compresses them, and so does auto
// with external brokers (franz-go's default).
func TestEngineProducesUncompressedToTheEmbeddedBroker(t *testing.T) {
	const none, snappy = 0, 2
	t.Run("embedded auto", func(t *testing.T) {
		codes := engineBatchCodecs(t, engine.Config{})
		for topic, got := range codes {
			assert.Equal(t, []uint8{none}, slices.Compact(slices.Sorted(slices.Values(got))), topic)
		}
	})
	t.Run("embedded snappy", func(t *testing.T) {
		codes := engineBatchCodecs(t, engine.Config{KafkaCompression: kafka.CompressionSnappy})
		for _, topic := range []string{protocol.StatusTopic, protocol.RepliesTopic} {
			assert.Contains(t, codes[topic], uint8(snappy), topic)
		}
	})
	t.Run("external auto", func(t *testing.T) {
		b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: quiet()})
		require.NoError(t, err)
		t.Cleanup(b.Close) // after the engine and the clients
		codes := engineBatchCodecs(t, engine.Config{KafkaBrokers: b.Addrs()})
		for _, topic := range []string{protocol.StatusTopic, protocol.RepliesTopic} {
			assert.Contains(t, codes[topic], uint8(snappy), topic)
		}
	})
}

// engineBatchCodecs starts an engine of cfg with one agent, runs one order
// through it and returns the compression codec of every record batch on the
// topics the engine produced to, by topic.
func engineBatchCodecs(t *testing.T, cfg engine.Config) map[string][]uint8 {
	t.Helper()
	result := map[string]string{"blob": strings.Repeat("compress me ", 500)}
	wf := &domain.Workflow{Name: "one", Steps: []domain.StepDefinition{{Name: "only", Agent: "worker", Budget: 10 * time.Second, MaxAttempts: 1}}}
	cfg.DataDir, cfg.KafkaListen, cfg.EventStoreListen, cfg.HTTPListen = t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Workflows, cfg.Logger, cfg.CommandsThroughKafka = []*domain.Workflow{wf}, quiet(), true
	cfg.Agents = map[string]agent.Handler{"worker": func(context.Context, agent.Request) (any, error) { return result, nil }}
	app, err := engine.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(app.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Brokers: app.KafkaBrokers})
	require.NoError(t, err)
	out, err := c.Run(ctx, "compressed-1", map[string]any{"workflow": "one"})
	c.Close()
	require.NoError(t, err)
	require.Equal(t, protocol.StatusProcessed, out.Final.Status)

	topics := append([]string{protocol.StatusTopic, protocol.RepliesTopic, protocol.AgentsTopic}, protocol.CommandTopics("worker")...)
	seen := &kafkatest.BatchCodecs{}
	reader, err := kgo.NewClient(kgo.SeedBrokers(app.KafkaBrokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.WithHooks(seen))
	require.NoError(t, err)
	defer reader.Close()
	var processed, replied bool
	for !processed || !replied {
		fetches := reader.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "the order's final status and its reply were read")
		fetches.EachRecord(func(r *kgo.Record) {
			switch r.Topic {
			case protocol.StatusTopic:
				s, err := protocol.ParseTaskStatus(r.Value)
				processed = processed || (err == nil && s.OrderID == "compressed-1" && s.Status == protocol.StatusProcessed)
			case protocol.RepliesTopic:
				replied = true
			}
		})
	}
	codes := seen.Codecs()
	for _, topic := range []string{protocol.StatusTopic, protocol.RepliesTopic, protocol.CommandTopic("worker")} {
		require.NotEmpty(t, codes[topic], "batches of %s read", topic)
	}
	return codes
}
