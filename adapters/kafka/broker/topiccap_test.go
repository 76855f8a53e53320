package broker_test

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

	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestTopicCapMakesRoomWithTheOldestAutoCreatedReplyTopics names one new
// reply topic per produce, as orders with distinct replyTo do: at the cap
// each new one takes the place of the oldest reply topic the broker
// auto-created, so the topics stay at the cap and every produce lands,
// while a reply topic a caller created itself (CreateTopics, as the Go
// client and sagactl do before they submit) is never deleted to make room.
func TestTopicCapMakesRoomWithTheOldestAutoCreatedReplyTopics(t *testing.T) {
	b, err := broker.Start(broker.Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 1, MaxTopics: 5, ReplyTopicGrace: -1, Retention: &broker.Retention{},
		Topics: []string{protocol.OrdersTopic, protocol.StatusTopic}, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ctx := testContext(t)
	_, err = kadm.NewClient(newClient(t, b)).CreateTopic(ctx, 1, 1, nil, "reply.mine")
	require.NoError(t, err)
	client := newClient(t, b, kgo.UnknownTopicRetries(0))
	for i := range 10 {
		topic := fmt.Sprintf("reply.c%d", i)
		require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("status")}).FirstErr(),
			"%s is created in the place of an older auto-created one", topic)
		// As saga's status publisher does once a task has finished: the
		// client's metadata refreshes no longer name the topic.
		client.PurgeTopicsFromClient(topic)
	}
	topics, max, err := b.TopicCapacity()
	require.NoError(t, err, "an auto-created reply topic can still make room")
	assert.Equal(t, 5, topics)
	assert.Equal(t, 5, max)
	assert.Equal(t, int64(8), b.EvictedTopics(), "ten created where two fit: reply.c0 to reply.c7 deleted")
	assert.Zero(t, b.RefusedTopics())

	listed := listTopics(t, b)
	assert.True(t, listed.Has("reply.mine"), "a reply topic its caller created stays")
	assert.True(t, listed.Has("reply.c9"))
	assert.True(t, listed.Has("reply.c8"))
	assert.False(t, listed.Has("reply.c0"), "the oldest auto-created reply topic made room")
	assert.True(t, listed.Has(protocol.OrdersTopic), "saga's own topics stay")
}

// TestTopicCapRefusesNewReplyTopicsAndIdleOnesAreDeleted fills the cap with
// topics callers created themselves, which nothing evicts: past it the
// broker creates no reply topic a produce names (the produce fails,
// UNKNOWN_TOPIC_OR_PARTITION) and TopicCapacity says so, while saga's own
// topics are still created and the topics that exist still take records;
// once the idle reply topics are deleted, new ones are created again.
func TestTopicCapRefusesNewReplyTopicsAndIdleOnesAreDeleted(t *testing.T) {
	b, err := broker.Start(broker.Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 1, MaxTopics: 5, Retention: &broker.Retention{},
		Topics: []string{protocol.OrdersTopic, protocol.StatusTopic}, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ctx := testContext(t)
	mine := []string{"reply.c0", "reply.c1", "reply.c2"}
	_, err = kadm.NewClient(newClient(t, b)).CreateTopics(ctx, 1, 1, nil, mine...)
	require.NoError(t, err)
	client := newClient(t, b, kgo.UnknownTopicRetries(0))
	for i := 3; i < 10; i++ {
		err := client.ProduceSync(ctx, &kgo.Record{Topic: fmt.Sprintf("reply.c%d", i), Value: []byte("status")}).FirstErr()
		require.ErrorIs(t, err, kerr.UnknownTopicOrPartition, "reply.c%d is refused: the cap holds only topics callers created", i)
	}
	topics, max, err := b.TopicCapacity()
	require.ErrorIs(t, err, broker.ErrTopicCap)
	assert.Equal(t, 5, topics)
	assert.Equal(t, 5, max)
	assert.GreaterOrEqual(t, b.RefusedTopics(), int64(7))
	assert.Zero(t, b.EvictedTopics())
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: protocol.AlertsTopic, Value: []byte("a")}).FirstErr(), "saga's own topics are never refused")
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: "reply.c0", Value: []byte("status")}).FirstErr(), "existing topics take records")
	assert.False(t, listTopics(t, b).Has("reply.c9"), "a refused topic was not created")

	// The client is done with its reply topics (saga's status publisher
	// forgets those of finished tasks): its metadata refreshes no longer
	// name them, which would create them again.
	client.PurgeTopicsFromClient("reply.c0", "reply.c1", "reply.c2", "reply.c3", "reply.c4", "reply.c5", "reply.c6", "reply.c7", "reply.c8", "reply.c9")
	idle := broker.Retention{IdleReplyTopicAfter: time.Nanosecond}
	_, err = b.RetainOnce(ctx, idle) // sees the reply topics' ends
	require.NoError(t, err)
	_, err = b.RetainOnce(ctx, idle) // and that they have not moved
	require.NoError(t, err)
	listed := listTopics(t, b)
	assert.False(t, listed.Has("reply.c0"), "an idle reply topic is deleted")
	assert.True(t, listed.Has(protocol.OrdersTopic), "other topics stay")
	_, _, err = b.TopicCapacity()
	require.NoError(t, err)
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: "reply.c9", Value: []byte("status")}).FirstErr(), "there is room again")
}

// listTopics lists the broker's topics with a fresh client: a client
// answers a listing from its metadata cache for a while.
func listTopics(t *testing.T, b *broker.Broker) kadm.TopicDetails {
	listed, err := kadm.NewClient(newClient(t, b)).ListTopics(testContext(t))
	require.NoError(t, err)
	return listed
}

func TestDefaultMaxTopicsFollowsTheFileLimit(t *testing.T) {
	assert.Equal(t, 256, broker.DefaultMaxTopics(4096, 4), "half of 4096 fds at 8 a topic")
	assert.Equal(t, 64, broker.DefaultMaxTopics(256, 4), "never below 64")
	assert.Equal(t, 4096, broker.DefaultMaxTopics(0, 4), "unknown limit")
	assert.Equal(t, 262144, broker.DefaultMaxTopics(1<<20, 1))
}
