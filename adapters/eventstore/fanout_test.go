package eventstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
)

// collector records the revisions a follower handled, by stream, and
// signals once it has seen want events.
type collector struct {
	mu   sync.Mutex
	seen map[string][]uint64
	n    int
	want int
	done chan struct{}
}

func newCollector(want int) *collector {
	return &collector{seen: map[string][]uint64{}, want: want, done: make(chan struct{})}
}

func (c *collector) handle(it domain.SubscriptionItem) error {
	if it.Event == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[it.Event.Stream] = append(c.seen[it.Event.Stream], it.Event.Revision)
	if c.n++; c.n == c.want {
		close(c.done)
	}
	return nil
}

func (c *collector) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s saw %d of %d events", what, c.n, c.want)
	}
}

// TestFanoutIsolatesFailingAndStuckFollowers shares one subscription among a
// follower that fails, one that hangs and one that keeps up: the one that
// keeps up sees every event while the others are in trouble, the hanging one
// is reported stalled, and once released it catches up on its own with no
// gap and no repeat.
func TestFanoutIsolatesFailingAndStuckFollowers(t *testing.T) {
	s, _ := open(t)
	prefix := "task-" + uuid.NewString()[:8] + "-"
	fan := eventstore.NewFanout(s, prefix)
	fan.QueueSize, fan.DetachAfter, fan.StallAfter = 4, 50*time.Millisecond, 100*time.Millisecond

	const streams, perStream = 6, 5
	steady, stuck := newCollector(streams*perStream), newCollector(streams*perStream)
	release, hanging := make(chan struct{}), make(chan struct{})
	var hangOnce sync.Once
	failing, steadyFeed, stuckFeed := fan.Register("failing"), fan.Register("steady"), fan.Register("stuck")

	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	failed := make(chan error, 1)
	go func() {
		failed <- failing.SubscribeAll(c, domain.FromStart(), prefix, func(it domain.SubscriptionItem) error {
			if it.Event != nil {
				return errors.New("handler broke")
			}
			return nil
		})
	}()
	go func() { _ = steadyFeed.SubscribeAll(c, domain.FromStart(), prefix, steady.handle) }()
	go func() {
		_ = stuckFeed.SubscribeAll(c, domain.FromStart(), prefix, func(it domain.SubscriptionItem) error {
			if it.Event != nil {
				hangOnce.Do(func() { close(hanging); <-release })
			}
			return stuck.handle(it)
		})
	}()
	go func() { _ = fan.Run(c) }()

	for i := 0; i < streams; i++ {
		stream := fmt.Sprintf("%s%d", prefix, i)
		for j := 0; j < perStream; j++ {
			_, err := s.Append(ctx(t), stream, domain.ExpectAny(), newEvent("E", fmt.Sprintf(`{"n":%d}`, j)))
			require.NoError(t, err)
		}
	}
	steady.wait(t, "the follower that keeps up")
	select {
	case err := <-failed:
		require.ErrorContains(t, err, "handler broke")
	case <-time.After(10 * time.Second):
		t.Fatal("the failing follower did not return its error")
	}
	<-hanging
	require.Eventually(t, func() bool { return len(fan.Stalled()) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{"stuck"}, fan.Stalled())

	close(release)
	stuck.wait(t, "the released follower")
	want := []uint64{0, 1, 2, 3, 4}
	for i := 0; i < streams; i++ {
		stream := fmt.Sprintf("%s%d", prefix, i)
		assert.Equal(t, want, steady.seen[stream], stream)
		assert.Equal(t, want, stuck.seen[stream], stream)
	}
	assert.Empty(t, fan.Stalled())
	assert.Equal(t, eventstore.FanoutStats{Detached: 1, Failed: 1}, fan.Stats())
}
