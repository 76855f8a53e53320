package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
)

// unsyncedTopic is a topic the default broker does not fsync.
const unsyncedTopic = domain.StatusTopic

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

func startBroker(t testing.TB, dir string, logs *lockedBuffer) *kafka.Broker {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	if logs != nil {
		logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	b, err := kafka.StartBroker(kafka.BrokerConfig{
		Listen: "127.0.0.1:0", DataDir: dir, Partitions: 1,
		Topics: []string{domain.OrdersTopic, unsyncedTopic}, Logger: logger,
	})
	require.NoError(t, err)
	t.Cleanup(b.Close) // after the clients' cleanups: they close first
	return b
}

func newClient(t testing.TB, b *kafka.Broker, opts ...kgo.Opt) *kgo.Client {
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
	kafka.SetSyncHooks(b, kafka.SyncHooks{
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
		acked <- client.ProduceSync(ctx, &kgo.Record{Topic: domain.OrdersTopic, Value: []byte("order")}).FirstErr()
	}()
	require.Equal(t, []string{domain.OrdersTopic + "/0"}, <-entered)
	select {
	case err := <-acked:
		t.Fatalf("the produce was acknowledged (err %v) while its fsync round was held", err)
	default:
	}
	close(release)
	require.NoError(t, <-acked)

	segment := filepath.Join(kafka.PartitionDir(dir, domain.OrdersTopic, 0), "0.dat")
	info, err := os.Stat(segment)
	require.NoError(t, err)
	synced, ok := sizes.get(segment)
	require.True(t, ok, "the segment was never fsynced")
	require.Equal(t, info.Size(), synced, "the acknowledged batch is not all fsynced")
	require.EqualValues(t, 1, kafka.SyncRounds(b))

	// A topic that is not synced is acknowledged without an fsync.
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: unsyncedTopic, Value: []byte("status")}).FirstErr())
	require.EqualValues(t, 1, kafka.SyncRounds(b))
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
	kafka.SetSyncHooks(b, kafka.SyncHooks{
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
			errs <- client.ProduceSync(ctx, &kgo.Record{Topic: domain.OrdersTopic, Value: fmt.Appendf(nil, "order-%d", i)}).FirstErr()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.LessOrEqual(t, kafka.SyncRounds(b), int64(2), "%d produces did not share fsync rounds", producers)
}

func TestBrokerRefusesSecondBrokerOnSameDataDir(t *testing.T) {
	dir := t.TempDir()
	first := startBroker(t, dir, nil)
	_, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0", DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, kafka.ErrDataDirLocked)
	require.ErrorContains(t, err, dir)
	first.Close()

	startBroker(t, dir, nil)
}
