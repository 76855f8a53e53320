package kafka_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestTopicCapRefusesNewReplyTopicsAndIdleOnesAreDeleted names one new
// reply topic per produce, as orders with distinct replyTo do: past the
// cap the broker creates none (the produce fails, UNKNOWN_TOPIC_OR_PARTITION)
// and TopicCapacity says so, while saga's own topics are still created and
// the topics that exist still take records; once the idle reply topics are
// deleted, new ones are created again.
func TestTopicCapRefusesNewReplyTopicsAndIdleOnesAreDeleted(t *testing.T) {
	b, err := kafka.StartBroker(kafka.BrokerConfig{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 1, MaxTopics: 5, Retention: &kafka.Retention{},
		Topics: []string{protocol.OrdersTopic, protocol.StatusTopic}, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ctx := testContext(t)
	client := newClient(t, b, kgo.UnknownTopicRetries(0))
	var created, refused int
	for i := range 10 {
		err := client.ProduceSync(ctx, &kgo.Record{Topic: fmt.Sprintf("reply.c%d", i), Value: []byte("status")}).FirstErr()
		if err != nil {
			require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
			refused++
			continue
		}
		created++
	}
	assert.Equal(t, 3, created, "five topics: the two seeded and three reply topics")
	assert.Equal(t, 7, refused)
	topics, max, err := b.TopicCapacity()
	require.ErrorIs(t, err, kafka.ErrTopicCap)
	assert.Equal(t, 5, topics)
	assert.Equal(t, 5, max)
	assert.GreaterOrEqual(t, b.RefusedTopics(), int64(7))
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: protocol.AlertsTopic, Value: []byte("a")}).FirstErr(), "saga's own topics are never refused")
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: "reply.c0", Value: []byte("status")}).FirstErr(), "existing topics take records")

	// A fresh client each time: a client answers a listing from its
	// metadata cache for a while.
	listTopics := func() kadm.TopicDetails {
		listed, err := kadm.NewClient(newClient(t, b)).ListTopics(ctx)
		require.NoError(t, err)
		return listed
	}
	listed := listTopics()
	assert.False(t, listed.Has("reply.c9"), "a refused topic was not created")

	// The client is done with its reply topics (saga's status publisher
	// forgets those of finished tasks): its metadata refreshes no longer
	// name them, which would create them again.
	client.PurgeTopicsFromClient("reply.c0", "reply.c1", "reply.c2", "reply.c3", "reply.c4", "reply.c5", "reply.c6", "reply.c7", "reply.c8", "reply.c9")
	idle := kafka.Retention{IdleReplyTopicAfter: time.Nanosecond}
	_, err = b.RetainOnce(ctx, idle) // sees the reply topics' ends
	require.NoError(t, err)
	_, err = b.RetainOnce(ctx, idle) // and that they have not moved
	require.NoError(t, err)
	listed = listTopics()
	assert.False(t, listed.Has("reply.c0"), "an idle reply topic is deleted")
	assert.True(t, listed.Has(protocol.OrdersTopic), "other topics stay")
	_, _, err = b.TopicCapacity()
	require.NoError(t, err)
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: "reply.c9", Value: []byte("status")}).FirstErr(), "there is room again")
}

func TestDefaultMaxTopicsFollowsTheFileLimit(t *testing.T) {
	assert.Equal(t, 256, kafka.DefaultMaxTopics(4096, 4), "half of 4096 fds at 8 a topic")
	assert.Equal(t, 64, kafka.DefaultMaxTopics(256, 4), "never below 64")
	assert.Equal(t, 4096, kafka.DefaultMaxTopics(0, 4), "unknown limit")
	assert.Equal(t, 262144, kafka.DefaultMaxTopics(1<<20, 1))
}
