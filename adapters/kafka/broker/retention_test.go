package broker_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain/protocol"
)

// startRetainingBroker starts a one-partition broker on dir whose retention
// runs only when the test calls RetainOnce.
func startRetainingBroker(t *testing.T, dir string) *broker.Broker {
	t.Helper()
	b, err := broker.Start(broker.Config{
		Listen: "127.0.0.1:0", DataDir: dir, Partitions: 1, Retention: &broker.Retention{},
		Topics: []string{protocol.OrdersTopic, protocol.StatusTopic}, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	return b
}

func produceN(t *testing.T, ctx context.Context, client *kgo.Client, topic string, n int, at time.Time) {
	t.Helper()
	for i := range n {
		r := &kgo.Record{Topic: topic, Value: []byte(strconv.Itoa(i)), Timestamp: at}
		require.NoError(t, client.ProduceSync(ctx, r).FirstErr())
	}
}

func startOffset(t *testing.T, ctx context.Context, adm *kadm.Client, topic string) int64 {
	t.Helper()
	starts, err := adm.ListStartOffsets(ctx, topic)
	require.NoError(t, err)
	o, ok := starts.Lookup(topic, 0)
	require.True(t, ok, "no start offset for %s", topic)
	require.NoError(t, o.Err)
	return o.Offset
}

func commit(t *testing.T, ctx context.Context, adm *kadm.Client, group, topic string, at int64) {
	t.Helper()
	offsets := kadm.Offsets{}
	offsets.Add(kadm.Offset{Topic: topic, Partition: 0, At: at, LeaderEpoch: -1})
	resp, err := adm.CommitOffsets(ctx, group, offsets)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
}

// TestRetentionNeverRemovesWhatAGroupHasNotConsumed shows the contract of the
// embedded broker's retention: a partition is cut to the newest MaxRecords,
// except that records a consumer group has not committed past stay however
// many follow them, and the cut survives a restart.
func TestRetentionNeverRemovesWhatAGroupHasNotConsumed(t *testing.T) {
	dir := t.TempDir()
	b := startRetainingBroker(t, dir)
	ctx := testContext(t)
	client, err := kafka.NewClient(b.Addrs())
	require.NoError(t, err)
	adm := kadm.NewClient(client)
	now := time.Now()
	produceN(t, ctx, client, protocol.OrdersTopic, 100, now)
	produceN(t, ctx, client, protocol.StatusTopic, 100, now)
	commit(t, ctx, adm, "submitter", protocol.OrdersTopic, 40)

	keep := broker.Retention{MaxRecords: 10}
	removed, err := b.RetainOnce(ctx, keep)
	require.NoError(t, err)
	assert.Equal(t, int64(90+40), removed)
	assert.Equal(t, int64(90), startOffset(t, ctx, adm, protocol.StatusTopic), "no group reads the statuses: the newest 10 are kept")
	assert.Equal(t, int64(40), startOffset(t, ctx, adm, protocol.OrdersTopic), "the orders the submitter has not committed past are kept")

	commit(t, ctx, adm, "submitter", protocol.OrdersTopic, 100)
	commit(t, ctx, adm, "auditor", protocol.OrdersTopic, 70) // a second group holds back more
	_, err = b.RetainOnce(ctx, keep)
	require.NoError(t, err)
	assert.Equal(t, int64(70), startOffset(t, ctx, adm, protocol.OrdersTopic), "the slowest group decides")

	client.Close()
	b.Close()
	b = startRetainingBroker(t, dir)
	t.Cleanup(b.Close)
	client = newClient(t, b)
	adm = kadm.NewClient(client)
	assert.Equal(t, int64(90), startOffset(t, ctx, adm, protocol.StatusTopic), "the cut survives a restart")
	assert.Equal(t, int64(70), startOffset(t, ctx, adm, protocol.OrdersTopic))

	reader := newClient(t, b, kgo.ConsumeTopics(protocol.StatusTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	fetches := reader.PollRecords(ctx, 1)
	require.NoError(t, fetches.Err())
	require.NotEmpty(t, fetches.Records())
	assert.Equal(t, int64(90), fetches.Records()[0].Offset, "a reader from the start begins at the first kept record")
}

// TestRetentionByAge removes records older than MaxAge and keeps the newer
// ones, by the records' own timestamps.
func TestRetentionByAge(t *testing.T) {
	b := startRetainingBroker(t, t.TempDir())
	t.Cleanup(b.Close)
	ctx := testContext(t)
	client := newClient(t, b)
	adm := kadm.NewClient(client)
	now := time.Now()
	produceN(t, ctx, client, protocol.StatusTopic, 3, now.Add(-2*time.Hour))
	produceN(t, ctx, client, protocol.StatusTopic, 2, now)

	_, err := b.RetainOnce(ctx, broker.Retention{MaxAge: time.Hour})
	require.NoError(t, err)
	assert.Equal(t, int64(3), startOffset(t, ctx, adm, protocol.StatusTopic))

	_, err = b.RetainOnce(ctx, broker.Retention{MaxAge: time.Hour})
	require.NoError(t, err)
	assert.Equal(t, int64(3), startOffset(t, ctx, adm, protocol.StatusTopic), "a second pass removes nothing new")
}

// TestRetentionRunsByItself shows the broker's own passes: nothing calls
// RetainOnce here.
func TestRetentionRunsByItself(t *testing.T) {
	b, err := broker.Start(broker.Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 1, Topics: []string{protocol.StatusTopic},
		Retention: &broker.Retention{MaxRecords: 5, Interval: 20 * time.Millisecond}, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ctx := testContext(t)
	client := newClient(t, b)
	adm := kadm.NewClient(client)
	produceN(t, ctx, client, protocol.StatusTopic, 20, time.Now())
	require.Eventually(t, func() bool { return startOffset(t, ctx, adm, protocol.StatusTopic) == 15 }, 10*time.Second, 10*time.Millisecond)
}

// TestRetentionLeavesCompactedTopicsAlone: a compacted topic's newest record
// per key is its content, so no count or age removes from it.
func TestRetentionLeavesCompactedTopicsAlone(t *testing.T) {
	b := startRetainingBroker(t, t.TempDir())
	t.Cleanup(b.Close)
	ctx := testContext(t)
	client := newClient(t, b)
	adm := kadm.NewClient(client)
	policy := "compact"
	_, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &policy}, "agents")
	require.NoError(t, err)
	produceN(t, ctx, client, "agents", 20, time.Now().Add(-30*24*time.Hour))

	_, err = b.RetainOnce(ctx, broker.Retention{MaxRecords: 5, MaxAge: time.Hour})
	require.NoError(t, err)
	assert.Equal(t, int64(0), startOffset(t, ctx, adm, "agents"))
}
