package broker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKfakesCleanerFindsNoRetentionToApply: kfake's own cleaner
// (hourly, whenever a topic is compacted, as saga.agents is) ignores
// consumer groups; it must find no retention to apply, neither a topic's
// retention.ms nor a broker-wide seven days, so that saga's rule (never past
// a committed offset) holds.
func TestKfakesCleanerFindsNoRetentionToApply(t *testing.T) {
	b, err := Start(Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 1, Retention: &Retention{}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	t.Cleanup(client.Close)
	adm := kadm.NewClient(client)
	minute := "60000"
	_, err = adm.CreateTopic(ctx, 1, -1, map[string]*string{"retention.ms": &minute}, "shop.events")
	require.NoError(t, err)
	old := time.Now().Add(-8 * 24 * time.Hour)
	for _, topic := range []string{"shop.events", "shop.plain"} {
		for range 3 {
			require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x"), Timestamp: old}).FirstErr())
		}
	}

	b.cluster.ApplyRetention()
	starts, err := adm.ListStartOffsets(ctx, "shop.events", "shop.plain")
	require.NoError(t, err)
	starts.Each(func(o kadm.ListedOffset) {
		assert.Equal(t, int64(0), o.Offset, o.Topic)
	})
}

// TestRetentionStoredByEarlierVersionsIsMovedAtStart: a topic's
// retention.ms that kfake stored under its own name (before the guard) is
// moved at start to where kfake's cleaner does not apply it, still
// reported and enforced; a value Kafka would refuse is dropped.
func TestRetentionStoredByEarlierVersionsIsMovedAtStart(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Listen: "127.0.0.1:0", DataDir: dir, Partitions: 1, Retention: &Retention{}, Logger: slog.New(slog.DiscardHandler)}
	b, err := Start(cfg)
	require.NoError(t, err)
	require.NoError(t, b.cluster.CreateTopic("shop.old", 1, map[string]string{"retention.ms": "60000", "retention.bytes": "abc"}))
	b.Close()

	b, err = Start(cfg)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	stored := b.cluster.TopicInfo("shop.old").Configs
	assert.NotContains(t, stored, "retention.ms")
	assert.NotContains(t, stored, "retention.bytes")
	require.Contains(t, stored, storedPrefix+"retention.ms")
	assert.Equal(t, "60000", *stored[storedPrefix+"retention.ms"])
	assert.NotContains(t, stored, storedPrefix+"retention.bytes")
}
