package kafka_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
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

func TestBrokerRefusesSecondBrokerOnSameDataDir(t *testing.T) {
	dir := t.TempDir()
	first := startBroker(t, dir, nil)
	_, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0", DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, kafka.ErrDataDirLocked)
	require.ErrorContains(t, err, dir)
	first.Close()

	startBroker(t, dir, nil)
}
