package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// unsyncedTopic is a topic the default broker does not fsync: commands.
var unsyncedTopic = protocol.CommandTopic("test")

// lockedBuffer collects log output from several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startBroker(t testing.TB, dir string, logs *lockedBuffer) *broker.Broker {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	if logs != nil {
		logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	b, err := broker.Start(broker.Config{
		Listen: "127.0.0.1:0", DataDir: dir, Partitions: 1,
		Topics: []string{protocol.OrdersTopic, unsyncedTopic}, Logger: logger,
	})
	require.NoError(t, err)
	t.Cleanup(b.Close) // after the clients' cleanups: they close first
	return b
}

func newClient(t testing.TB, b *broker.Broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	client, err := kafka.NewClient(b.Addrs(), opts...)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return client
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// syncedSizes records the size of every file as last fsynced.
type syncedSizes struct {
	mu    sync.Mutex
	sizes map[string]int64
}

func (s *syncedSizes) record(path string, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sizes == nil {
		s.sizes = map[string]int64{}
	}
	s.sizes[path] = max(s.sizes[path], size)
}

func (s *syncedSizes) get(path string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	size, ok := s.sizes[path]
	return size, ok
}

func TestBrokerFsyncsSyncedTopicBeforeAcknowledging(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, nil)
	var (
		sizes   syncedSizes
		entered = make(chan []string, 1)
		release = make(chan struct{})
		first   sync.Once
	)
	broker.SetSyncHooks(b, broker.SyncHooks{
		Round: func(parts []string) {
			first.Do(func() {
				entered <- parts
				<-release
			})
		},
		Synced: sizes.record,
	})
	client := newClient(t, b)
	ctx := testContext(t)

	acked := make(chan error, 1)
	go func() {
		acked <- client.ProduceSync(ctx, &kgo.Record{Topic: protocol.OrdersTopic, Value: []byte("order")}).FirstErr()
	}()
	require.Equal(t, []string{protocol.OrdersTopic + "/0"}, <-entered)
	select {
	case err := <-acked:
		t.Fatalf("the produce was acknowledged (err %v) while its fsync round was held", err)
	default:
	}
	close(release)
	require.NoError(t, <-acked)

	segment := filepath.Join(broker.PartitionDir(dir, protocol.OrdersTopic, 0), "0.dat")
	info, err := os.Stat(segment)
	require.NoError(t, err)
	synced, ok := sizes.get(segment)
	require.True(t, ok, "the segment was never fsynced")
	require.Equal(t, info.Size(), synced, "the acknowledged batch is not all fsynced")
	require.EqualValues(t, 1, broker.SyncRounds(b))

	// A topic that is not synced is acknowledged without an fsync.
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: unsyncedTopic, Value: []byte("status")}).FirstErr())
	require.EqualValues(t, 1, broker.SyncRounds(b))
}

// TestDefaultSyncTopicsKeepEveryInputAndLeaveWhatRecoveryRederives: every
// topic that may carry an order (any workflow's trigger topic, not only
// orders) is fsynced before it is acknowledged, as are dead letters,
// alerts, barriers and an application's own topics; commands, replies,
// heartbeats and statuses are not (statuses are fsynced by barriers).
func TestDefaultSyncTopicsKeepEveryInputAndLeaveWhatRecoveryRederives(t *testing.T) {
	for topic, synced := range map[string]bool{
		protocol.OrdersTopic: true, "shop.orders": true, "payments-in": true, protocol.DeadLetterTopic: true,
		protocol.AlertsTopic: true, protocol.SyncBarrierTopic: true, "app.events": true,
		protocol.CommandTopic("payment"): false, protocol.CommandTopicFor("payment", domain.PriorityHigh): false,
		protocol.RepliesTopic: false, protocol.AgentsTopic: false, protocol.StatusTopic: false,
		"reply.shop": false, domain.ReplyTopicPrefix + "f00d": false,
	} {
		assert.Equal(t, synced, broker.SyncTopicMatch(broker.DefaultSyncTopics, topic), topic)
	}
	assert.True(t, broker.SyncTopicMatch([]string{"a*", "!ab*", "abc"}, "ax"))
	assert.False(t, broker.SyncTopicMatch([]string{"a*", "!ab*", "abc"}, "abc"), "an exclusion wins")
	assert.False(t, broker.SyncTopicMatch(nil, "orders"))

	// A workflow's own trigger topic is acknowledged only once fsynced.
	dir := t.TempDir()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: dir, Partitions: 1,
		Topics: []string{"shop.orders"}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	var sizes syncedSizes
	broker.SetSyncHooks(b, broker.SyncHooks{Synced: sizes.record})
	require.NoError(t, newClient(t, b).ProduceSync(testContext(t), &kgo.Record{Topic: "shop.orders", Value: []byte("order")}).FirstErr())
	segment := filepath.Join(broker.PartitionDir(dir, "shop.orders", 0), "0.dat")
	info, err := os.Stat(segment)
	require.NoError(t, err)
	synced, ok := sizes.get(segment)
	require.True(t, ok, "an order on a workflow's trigger topic was acknowledged unsynced")
	require.Equal(t, info.Size(), synced)
}

// TestSyncBarrierFsyncsWhatWasAcknowledgedBeforeIt produces statuses,
// which are acknowledged without an fsync, then a sync barrier: the
// barrier is acknowledged only once the statuses' files are fsynced as far
// as they were written when it came, whatever topic they went to. Records
// produced after the barrier wait for the next one.
func TestSyncBarrierFsyncsWhatWasAcknowledgedBeforeIt(t *testing.T) {
	dir := t.TempDir()
	reply := "reply.shop"
	b, err := broker.Start(broker.Config{
		Listen: "127.0.0.1:0", DataDir: dir, Partitions: 2, Logger: slog.New(slog.DiscardHandler),
		Topics: []string{protocol.StatusTopic, reply, protocol.SyncBarrierTopic, unsyncedTopic},
	})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	var sizes syncedSizes
	broker.SetSyncHooks(b, broker.SyncHooks{Synced: sizes.record})
	client := newClient(t, b)
	ctx := testContext(t)

	segments := func() map[string]int64 {
		out := map[string]int64{}
		for _, topic := range []string{protocol.StatusTopic, reply} {
			for part := range int32(2) {
				path := filepath.Join(broker.PartitionDir(dir, topic, part), "0.dat")
				if info, err := os.Stat(path); err == nil && info.Size() > 0 {
					out[path] = info.Size()
				}
			}
		}
		return out
	}
	for i := range 20 {
		for _, topic := range []string{protocol.StatusTopic, reply} {
			rec := &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("o-%d", i)), Value: []byte("status")}
			require.NoError(t, client.ProduceSync(ctx, rec).FirstErr())
		}
	}
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: unsyncedTopic, Value: []byte("command")}).FirstErr())
	written := segments()
	require.Len(t, written, 4, "keys spread over both partitions of both topics")
	require.Zero(t, broker.SyncRounds(b), "statuses are acknowledged without an fsync")

	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: protocol.SyncBarrierTopic, Value: nil}).FirstErr())
	for path, size := range written {
		synced, ok := sizes.get(path)
		require.True(t, ok, "%s was written before the barrier and never fsynced", path)
		require.GreaterOrEqual(t, synced, size, "%s is not fsynced as far as it was acknowledged", path)
	}
	for part := range int32(2) {
		_, ok := sizes.get(filepath.Join(broker.PartitionDir(dir, unsyncedTopic, part), "0.dat"))
		require.False(t, ok, "a barrier does not fsync commands: recovery sends them again")
	}

	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: reply, Key: []byte("o-late"), Value: []byte("later")}).FirstErr())
	later := segments()
	rounds := broker.SyncRounds(b)
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: protocol.SyncBarrierTopic, Value: nil}).FirstErr())
	require.Equal(t, rounds+1, broker.SyncRounds(b))
	for path, size := range later {
		synced, _ := sizes.get(path)
		require.GreaterOrEqual(t, synced, size, "%s: the second barrier did not sync what came after the first", path)
	}
}

func TestBrokerConcurrentProducesShareFsyncs(t *testing.T) {
	const producers = 16
	b := startBroker(t, t.TempDir(), nil)
	var (
		joined    atomic.Int32
		allJoined = make(chan struct{})
		first     sync.Once
	)
	// The first round is held until every produce waits for an fsync, so
	// all but those in the first round must share the second.
	broker.SetSyncHooks(b, broker.SyncHooks{
		Joined: func() {
			if joined.Add(1) == producers {
				close(allJoined)
			}
		},
		Round: func([]string) { first.Do(func() { <-allJoined }) },
	})
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for i := range producers {
		client := newClient(t, b) // a connection of its own
		wg.Go(func() {
			errs <- client.ProduceSync(ctx, &kgo.Record{Topic: protocol.OrdersTopic, Value: fmt.Appendf(nil, "order-%d", i)}).FirstErr()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.LessOrEqual(t, broker.SyncRounds(b), int64(2), "%d produces did not share fsync rounds", producers)
}

func TestBrokerRefusesSecondBrokerOnSameDataDir(t *testing.T) {
	dir := t.TempDir()
	first := startBroker(t, dir, nil)
	_, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, broker.ErrDataDirLocked)
	require.ErrorContains(t, err, dir)
	first.Close()

	startBroker(t, dir, nil)
}

// TestBrokerPowerLossLosesNoAckedOrderAndSkipsNoNewRecord simulates a power
// loss the way it can look on disk: every file keeps only what was fsynced
// (synced topics: what the sync layer fsynced; the other topic: nothing),
// while the group's commits survive, and the clean-shutdown files are gone.
// Every acknowledged order must still be there, and the group must consume
// every record produced after the restart, although its commit on the other
// topic points past that topic's new log end.
func TestBrokerPowerLossLosesNoAckedOrderAndSkipsNoNewRecord(t *testing.T) {
	const (
		before = 40 // records per topic before the power loss
		after  = 60 // and after: more, so reused offsets pass the stale commit
		group  = "saga-submitter"
	)
	dir := t.TempDir()
	ctx := testContext(t)
	var sizes syncedSizes

	b := startBroker(t, dir, nil)
	broker.SetSyncHooks(b, broker.SyncHooks{Synced: sizes.record})
	producer := newClient(t, b)
	produce(ctx, t, producer, "old", before)
	got := consumeGroup(ctx, t, b, group, before, before)
	require.Len(t, got[protocol.OrdersTopic], before)
	producer.Close()
	b.Close()

	// The power goes.
	require.NoError(t, filepath.WalkDir(filepath.Join(dir, "partitions"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch {
		case d.Name() == "snapshot.json":
			return os.Remove(path)
		case !strings.HasSuffix(path, ".dat") && !strings.HasSuffix(path, ".idx"):
			return nil
		}
		keep := int64(0)
		if strings.HasPrefix(filepath.Base(filepath.Dir(path)), protocol.OrdersTopic+"-") {
			keep, _ = sizes.get(path)
			info, err := os.Stat(path)
			require.NoError(t, err)
			require.Equal(t, info.Size(), keep, "%s holds acknowledged data that was never fsynced", path)
		}
		return os.Truncate(path, keep)
	}))
	if err := os.Remove(filepath.Join(dir, "session_state.json")); !errors.Is(err, os.ErrNotExist) {
		require.NoError(t, err)
	}

	var logs lockedBuffer
	b = startBroker(t, dir, &logs)
	require.Contains(t, logs.String(), "clamping")
	require.Contains(t, logs.String(), "topic="+unsyncedTopic)
	require.Contains(t, logs.String(), fmt.Sprintf("old=%d new=0", before))

	producer = newClient(t, b)
	produce(ctx, t, producer, "new", after)
	got = consumeGroup(ctx, t, b, group, after, after)
	for _, topic := range []string{protocol.OrdersTopic, unsyncedTopic} {
		for i := range after {
			require.Contains(t, got[topic], fmt.Sprintf("new-%d", i), "the group skipped a record of %s", topic)
		}
	}

	// And the old orders are all still there.
	reader := newClient(t, b, kgo.ConsumeTopics(protocol.OrdersTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var orders []string
	for len(orders) < before+after {
		fetches := reader.PollFetches(ctx)
		require.NoError(t, fetches.Err())
		fetches.EachRecord(func(r *kgo.Record) { orders = append(orders, string(r.Value)) })
	}
	for i := range before {
		require.Equal(t, fmt.Sprintf("old-%d", i), orders[i])
	}
}

// produce writes n records to the orders and the unsynced topic, in a few
// batches.
func produce(ctx context.Context, t *testing.T, client *kgo.Client, prefix string, n int) {
	t.Helper()
	for start := 0; start < n; start += 10 {
		var records []*kgo.Record
		for i := start; i < min(start+10, n); i++ {
			for _, topic := range []string{protocol.OrdersTopic, unsyncedTopic} {
				records = append(records, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s-%d", prefix, i)})
			}
		}
		require.NoError(t, client.ProduceSync(ctx, records...).FirstErr())
	}
}

// consumeGroup consumes both topics in the group until it has at least
// orders and statuses records, commits, and leaves the group.
func consumeGroup(ctx context.Context, t *testing.T, b *broker.Broker, group string, orders, statuses int) map[string][]string {
	t.Helper()
	client, err := kgo.NewClient(
		kgo.SeedBrokers(b.Addrs()...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(protocol.OrdersTopic, unsyncedTopic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	require.NoError(t, err)
	defer client.Close()
	got := map[string][]string{}
	for len(got[protocol.OrdersTopic]) < orders || len(got[unsyncedTopic]) < statuses {
		fetches := client.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d orders and %d statuses of %d and %d: %v", len(got[protocol.OrdersTopic]), len(got[unsyncedTopic]), orders, statuses, err)
		}
		require.NoError(t, fetches.Err())
		fetches.EachRecord(func(r *kgo.Record) { got[r.Topic] = append(got[r.Topic], string(r.Value)) })
	}
	require.NoError(t, client.CommitUncommittedOffsets(ctx))
	return got
}

// BenchmarkProduceSynced measures acknowledged produces of one small record
// to the orders topic with 1 and 64 producers on connections of their own:
// synced (the default, group commit), unsynced, and with Fsync (kfake's
// SyncWrites, an fsync per batch, one after the other).
func BenchmarkProduceSynced(b *testing.B) {
	for _, mode := range []struct {
		name  string
		sync  []string
		fsync bool
	}{{"synced", nil, false}, {"unsynced", []string{}, false}, {"fsync-every-batch", nil, true}} {
		for _, producers := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/producers=%d", mode.name, producers), func(b *testing.B) {
				embedded, err := broker.Start(broker.Config{
					Listen: "127.0.0.1:0", DataDir: b.TempDir(), Partitions: 4,
					Topics: []string{protocol.OrdersTopic}, SyncTopics: mode.sync, Fsync: mode.fsync, Logger: slog.New(slog.DiscardHandler),
				})
				require.NoError(b, err)
				b.Cleanup(embedded.Close)
				ctx := testContext(b)
				clients := make([]*kgo.Client, producers)
				for i := range clients {
					clients[i] = newClient(b, embedded)
					require.NoError(b, clients[i].ProduceSync(ctx, &kgo.Record{Topic: protocol.OrdersTopic, Value: []byte("warm-up")}).FirstErr())
				}
				value := bytes.Repeat([]byte("x"), 200)
				var next atomic.Int64
				b.ResetTimer()
				var wg sync.WaitGroup
				failed := make(chan error, producers)
				for _, client := range clients {
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							if err := client.ProduceSync(ctx, &kgo.Record{Topic: protocol.OrdersTopic, Value: value}).FirstErr(); err != nil {
								failed <- err
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				close(failed)
				for err := range failed {
					require.NoError(b, errors.Wrap(err, "produce"))
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
				if mode.sync == nil && !mode.fsync {
					b.ReportMetric(float64(broker.SyncRounds(embedded)-int64(producers))/float64(b.N), "rounds/op")
				}
			})
		}
	}
}
