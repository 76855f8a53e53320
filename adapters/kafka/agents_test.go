package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// t0 is the directory tests' time: heartbeats are sent at t0 and expire
// three seconds later.
var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func heartbeat(agent, instance, health string) protocol.AgentHeartbeat {
	return protocol.AgentHeartbeat{Agent: agent, Instance: instance, Health: health, Capacity: 8, InFlight: 3,
		Waiting: map[domain.Priority]int{domain.PriorityHigh: 1}, StartedAt: t0.Add(-time.Hour), At: t0, ExpiresAt: t0.Add(3 * time.Second)}
}

// produceRecords writes records to the heartbeats' topic.
func produceRecords(t *testing.T, client *kgo.Client, records ...*kgo.Record) {
	t.Helper()
	for _, r := range records {
		r.Topic = protocol.AgentsTopic
	}
	require.NoError(t, client.ProduceSync(testContext(t), records...).FirstErr())
}

func heartbeatRecord(t *testing.T, h protocol.AgentHeartbeat) *kgo.Record {
	body, err := json.Marshal(h)
	require.NoError(t, err)
	return &kgo.Record{Key: []byte(h.Instance), Value: body}
}

// directoryBroker starts a broker with the compacted heartbeats' topic (two
// partitions) and a client to produce to it.
func directoryBroker(t *testing.T) (*broker.Broker, *kgo.Client) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 2, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	client := newClient(t, b)
	require.NoError(t, kafka.EnsureCompactedTopics(testContext(t), client, 2, protocol.AgentsTopic))
	return b, client
}

// runDirectory runs a directory until the test ends, on a clock the test
// moves.
func runDirectory(t *testing.T, b *broker.Broker, clock *atomic.Pointer[time.Time], cfg kafka.AgentDirectoryConfig) *kafka.AgentDirectory {
	cfg.Brokers, cfg.Logger = b.Addrs(), slog.New(slog.DiscardHandler)
	cfg.SweepEvery = 50 * time.Millisecond
	cfg.Now = func() time.Time { return *clock.Load() }
	d, err := kafka.NewAgentDirectory(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return d
}

func clockAt(at time.Time) *atomic.Pointer[time.Time] {
	var c atomic.Pointer[time.Time]
	c.Store(&at)
	return &c
}

func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting: " + what)
	}
}

// awaitChange waits, change after change, until cond holds, taking
// Changed before each check so that no change is missed.
func awaitChange(t *testing.T, d *kafka.AgentDirectory, what string, cond func() bool) {
	t.Helper()
	for {
		changed := d.Changed()
		if cond() {
			return
		}
		await(t, changed, what)
	}
}

func instancesOf(hs []protocol.AgentHeartbeat) []string {
	out := []string{}
	for _, h := range hs {
		out = append(out, h.Instance)
	}
	return out
}

// TestAgentDirectoryFollowsHeartbeats: what was written before the
// directory started is there once it is Ready; a heartbeat from a new
// instance and a tombstone are told of by Changed; records that are not
// valid heartbeats are counted and skipped, and the ones after them read.
func TestAgentDirectoryFollowsHeartbeats(t *testing.T) {
	b, client := directoryBroker(t)
	produceRecords(t, client, heartbeatRecord(t, heartbeat("payment", "pay-2", protocol.HealthHealthy)),
		heartbeatRecord(t, heartbeat("payment", "pay-1", protocol.HealthTrial)),
		heartbeatRecord(t, heartbeat("shipping", "ship-1", protocol.HealthHealthy)))
	var changeCount atomic.Int64
	d := runDirectory(t, b, clockAt(t0), kafka.AgentDirectoryConfig{OnChange: func() { changeCount.Add(1) }})
	await(t, d.Ready(), "ready")

	got := d.Instances("payment", t0)
	assert.Equal(t, []string{"pay-1", "pay-2"}, instancesOf(got), "live instances, by instance")
	assert.Equal(t, protocol.HealthTrial, got[0].Health)
	assert.Equal(t, 1, got[1].Waiting[domain.PriorityHigh])
	assert.Empty(t, d.Instances("inventory", t0), "an agent with no heartbeats")

	changed := d.Changed()
	produceRecords(t, client, &kgo.Record{Key: []byte("pay-2")}) // a tombstone
	await(t, changed, "the tombstone is told of")
	awaitChange(t, d, "pay-2 removed", func() bool { return len(d.Instances("payment", t0)) == 1 })
	assert.Equal(t, []string{"pay-1"}, instancesOf(d.Instances("payment", t0)))

	bad := heartbeat("payment", "pay-3", "sleepy")
	huge := heartbeat("payment", "pay-6", protocol.HealthUnhealthy)
	huge.Reason = strings.Repeat("x", kafka.MaxHeartbeatBytes)
	mismatched := heartbeatRecord(t, heartbeat("payment", "pay-4", protocol.HealthHealthy))
	mismatched.Key = []byte("someone-else")
	changed = d.Changed()
	// In one partition, so that pay-5 is read after the bad records.
	batch := []*kgo.Record{{Key: []byte("pay-9"), Value: []byte("{not json")}, heartbeatRecord(t, bad), mismatched,
		{Key: []byte("pay-9"), Value: []byte{0xff, 0x00}}, heartbeatRecord(t, huge),
		heartbeatRecord(t, heartbeat("payment", "pay-5", protocol.HealthHealthy))}
	for _, r := range batch {
		r.Partition = 1
	}
	produceRecords(t, newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner())), batch...)
	await(t, changed, "the valid heartbeat after the bad records is told of")
	awaitChange(t, d, "pay-5", func() bool { return len(d.Instances("payment", t0)) == 2 })
	assert.Equal(t, []string{"pay-1", "pay-5"}, instancesOf(d.Instances("payment", t0)))
	st := d.Stats()
	assert.Equal(t, int64(5), st.Invalid)
	assert.Equal(t, int64(1), st.Tombstones)
	assert.Equal(t, int64(4), st.Heartbeats)
	assert.Equal(t, 3, st.Instances)
	assert.Positive(t, changeCount.Load(), "OnChange is called too")

	changed = d.Changed()
	produceRecords(t, client, heartbeatRecord(t, heartbeat("billing", "pay-5", protocol.HealthHealthy)))
	await(t, changed, "an instance that names another agent")
	awaitChange(t, d, "pay-5 of billing", func() bool { return len(d.Instances("billing", t0)) == 1 })
	assert.Equal(t, []string{"pay-1"}, instancesOf(d.Instances("payment", t0)))
	assert.Equal(t, []string{"pay-5"}, instancesOf(d.Instances("billing", t0)))
}

// TestAgentDirectoryExpiresInstances: an instance past its ExpiresAt is no
// longer live, All shows it as gone for KeepGone, then forgets it; the
// sweep tells of both.
func TestAgentDirectoryExpiresInstances(t *testing.T) {
	b, client := directoryBroker(t)
	clock := clockAt(t0)
	d := runDirectory(t, b, clock, kafka.AgentDirectoryConfig{KeepGone: time.Minute})
	await(t, d.Ready(), "ready on an empty topic")
	changed := d.Changed()
	fresh := heartbeat("payment", "pay-2", protocol.HealthHealthy)
	fresh.ExpiresAt = t0.Add(time.Hour)
	produceRecords(t, client, heartbeatRecord(t, heartbeat("payment", "pay-1", protocol.HealthHealthy)), heartbeatRecord(t, fresh))
	await(t, changed, "a first heartbeat")
	awaitChange(t, d, "both heartbeats", func() bool { return len(d.Instances("payment", t0)) == 2 })

	later := t0.Add(10 * time.Second)
	assert.Equal(t, []string{"pay-2"}, instancesOf(d.Instances("payment", later)), "pay-1 expired")
	all := d.All(later)
	require.Len(t, all, 2)
	assert.True(t, all[0].Gone, "pay-1 is shown as gone")
	assert.False(t, all[1].Gone)

	changed = d.Changed()
	clock.Store(&later)
	await(t, changed, "the sweep tells of the expiry")

	muchLater := t0.Add(2 * time.Minute)
	assert.Len(t, d.All(muchLater), 1, "gone for longer than KeepGone: not shown")
	changed = d.Changed()
	clock.Store(&muchLater)
	await(t, changed, "the sweep forgets pay-1")
	assert.Equal(t, 1, d.Stats().Instances)
}

// TestAgentDirectoryHoldsItsCap: past MaxInstances, expired instances go
// first, then those closest to expiring.
func TestAgentDirectoryHoldsItsCap(t *testing.T) {
	b, _ := directoryBroker(t)
	var records []*kgo.Record
	for i := range 5 {
		h := heartbeat("payment", fmt.Sprintf("pay-%d", i), protocol.HealthHealthy)
		h.ExpiresAt = t0.Add(time.Duration(10-i) * time.Second) // pay-0 lasts longest
		if i == 2 {
			h.ExpiresAt = t0.Add(-time.Second) // already expired
		}
		records = append(records, heartbeatRecord(t, h))
	}
	// The order of one partition decides which are evicted.
	for _, r := range records {
		r.Partition = 0
	}
	produceRecords(t, newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner())), records...)
	d := runDirectory(t, b, clockAt(t0), kafka.AgentDirectoryConfig{MaxInstances: 3})
	await(t, d.Ready(), "ready")
	// pay-0, pay-1, pay-2 fill it; pay-3 evicts pay-2 (expired); pay-4
	// evicts pay-3 (the live one expiring first).
	assert.Equal(t, []string{"pay-0", "pay-1", "pay-4"}, instancesOf(d.Instances("payment", t0)))
	assert.Equal(t, int64(2), d.Stats().Evicted)
	assert.Equal(t, 3, d.Stats().Instances)
}

// TestEnsureCompactedTopicsIsIdempotent: the topic is created compacted,
// an existing uncompacted one is made compacted, and again changes nothing.
func TestEnsureCompactedTopicsIsIdempotent(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 1, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ctx := testContext(t)
	client := newClient(t, b)
	adm := kadm.NewClient(client)
	_, err = adm.CreateTopic(ctx, 1, -1, nil, "plain")
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, kafka.EnsureCompactedTopics(ctx, client, 1, protocol.AgentsTopic, "plain"))
	}
	described, err := adm.DescribeTopicConfigs(ctx, protocol.AgentsTopic, "plain")
	require.NoError(t, err)
	for _, rc := range described {
		policy := ""
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" {
				policy = c.MaybeValue()
			}
		}
		assert.Equal(t, "compact", policy, rc.Name)
	}
}

// TestAgentDirectoryIsReadyWhenTheTopicWasTrimmed: a partition whose
// records were all removed holds nothing to wait for.
func TestAgentDirectoryIsReadyWhenTheTopicWasTrimmed(t *testing.T) {
	b, client := directoryBroker(t)
	var records []*kgo.Record
	for i := range 3 {
		r := heartbeatRecord(t, heartbeat("payment", fmt.Sprintf("pay-%d", i), protocol.HealthHealthy))
		r.Partition = 0
		records = append(records, r)
	}
	produceRecords(t, newClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner())), records...)
	ctx := testContext(t)
	adm := kadm.NewClient(client)
	ends, err := adm.ListEndOffsets(ctx, protocol.AgentsTopic)
	require.NoError(t, err)
	deleted, err := adm.DeleteRecords(ctx, ends.Offsets())
	require.NoError(t, err)
	require.NoError(t, deleted.Error())

	began := time.Now()
	d := runDirectory(t, b, clockAt(t0), kafka.AgentDirectoryConfig{CatchUpIdle: time.Minute})
	await(t, d.Ready(), "ready")
	assert.Less(t, time.Since(began), 30*time.Second, "without waiting for the idle fallback")
	assert.Empty(t, d.Instances("payment", t0))
}
