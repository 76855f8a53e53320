package kafka_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/kafka"
)

// TestLeaseIsHandedOverWhenTheLeaderStops runs two members of one election
// against the in-process broker: exactly one leads, and once the leader's
// Run ends (its process stops) the other takes over, without waiting for
// the session to time out.
func TestLeaseIsHandedOverWhenTheLeaderStops(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	b, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 1, Logger: logger})
	require.NoError(t, err)
	t.Cleanup(b.Close)

	setup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var leases [2]*kafka.Lease
	var stops [2]context.CancelFunc
	var ended [2]chan error // each delivers Run's error once, then is closed
	for i := range leases {
		l, err := kafka.NewLease(setup, b.Addrs(), "lease-test", logger)
		require.NoError(t, err)
		ctx, stop := context.WithCancel(context.Background())
		leases[i], stops[i], ended[i] = l, stop, make(chan error, 1)
		go func() { ended[i] <- l.Run(ctx); close(ended[i]) }()
		t.Cleanup(func() {
			stop()
			for range ended[i] {
			}
		})
	}
	// The set-up context ending must not stop the members (it used to).
	cancel()

	var leader int
	require.Eventually(t, func() bool {
		a, b := leases[0].IsLeader(), leases[1].IsLeader()
		if a != b {
			leader = map[bool]int{true: 0, false: 1}[a]
			return true
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "one member leads")
	time.Sleep(500 * time.Millisecond)
	require.NotEqual(t, leases[0].IsLeader(), leases[1].IsLeader(), "still exactly one leader")

	other := 1 - leader
	began := time.Now()
	stops[leader]()
	require.NoError(t, <-ended[leader])
	require.False(t, leases[leader].IsLeader(), "a stopped member does not lead")
	require.Eventually(t, leases[other].IsLeader, 30*time.Second, 20*time.Millisecond, "the other member takes over")
	t.Logf("handed over in %s", time.Since(began).Round(time.Millisecond))
}
