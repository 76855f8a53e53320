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

// TestFanoutStartsWhereItsEarliestFollowerStarts gives two followers
// checkpoints near the end of a long history: the shared subscription
// reads only what comes after the earlier checkpoint, each follower gets
// exactly what comes after its own, and a follower that subscribes late
// from the start still gets everything, on a subscription of its own.
func TestFanoutStartsWhereItsEarliestFollowerStarts(t *testing.T) {
	s, _ := open(t)
	prefix := "task-" + uuid.NewString()[:8] + "-"
	var positions []uint64
	for i := range 40 {
		_, err := s.Append(ctx(t), fmt.Sprintf("%s%d", prefix, i%4), domain.ExpectAny(), newEvent("E", fmt.Sprintf(`{"n":%d}`, i)))
		require.NoError(t, err)
	}
	all, err := s.ReadStream(ctx(t), prefix+"0")
	require.NoError(t, err)
	require.Len(t, all, 10)
	for _, e := range all {
		positions = append(positions, e.Position)
	}
	// Stream 0 holds events 0, 4, 8, ...: its 8th event is the 29th of 40.
	early, late := positions[7], positions[8]

	fan := eventstore.NewFanout(s, prefix)
	fan.AttachWait = 2 * time.Second
	a, b, c := newCollector(40-29), newCollector(40-33), newCollector(40)
	feedA, feedB, feedC := fan.Register("a"), fan.Register("b"), fan.Register("late")
	run, cancel := context.WithCancel(ctx(t))
	defer cancel()
	go func() { _ = feedA.SubscribeAll(run, domain.AfterPosition(early), prefix, a.handle) }()
	go func() { _ = feedB.SubscribeAll(run, domain.AfterPosition(late), prefix, b.handle) }()
	go func() { _ = fan.Run(run) }()
	a.wait(t, "the follower from the earlier checkpoint")
	b.wait(t, "the follower from the later checkpoint")
	assert.Equal(t, int64(40-29), fan.Delivered(), "the shared subscription read only what follows the earliest checkpoint")
	assert.Equal(t, []uint64{8, 9}, a.seen[prefix+"0"])
	assert.Equal(t, []uint64{9}, b.seen[prefix+"0"])

	go func() { _ = feedC.SubscribeAll(run, domain.FromStart(), prefix, c.handle) }()
	c.wait(t, "the follower that came late from the start")
	assert.Equal(t, int64(40-29), fan.Delivered())
}

// TestFanoutLeavesAFollowerFarBehindToItsOwnSubscription registers, before
// the fan-out runs, two followers resuming from checkpoints near the end of
// a history and one from its start (a task view being rebuilt): the shared
// subscription starts at the earlier checkpoint, so the two do not wait for
// the history to be read, and the third still gets every event, on a
// subscription of its own.
func TestFanoutLeavesAFollowerFarBehindToItsOwnSubscription(t *testing.T) {
	s, _ := open(t)
	prefix := "task-" + uuid.NewString()[:8] + "-"
	for i := range 40 {
		_, err := s.Append(ctx(t), fmt.Sprintf("%s%d", prefix, i%4), domain.ExpectAny(), newEvent("E", fmt.Sprintf(`{"n":%d}`, i)))
		require.NoError(t, err)
	}
	all, err := s.ReadStream(ctx(t), prefix+"0")
	require.NoError(t, err)
	early, late := all[7].Position, all[8].Position

	fan := eventstore.NewFanout(s, prefix)
	fan.AttachWait = 2 * time.Second
	fan.FarBehind = late - early + 1 // the two checkpoints are close; the start is far
	a, b, c := newCollector(40-29), newCollector(40-33), newCollector(40)
	feedA, feedB, feedC := fan.Register("a"), fan.Register("b"), fan.Register("view")
	run, cancel := context.WithCancel(ctx(t))
	defer cancel()
	go func() { _ = feedA.SubscribeAll(run, domain.AfterPosition(early), prefix, a.handle) }()
	go func() { _ = feedB.SubscribeAll(run, domain.AfterPosition(late), prefix, b.handle) }()
	go func() { _ = feedC.SubscribeAll(run, domain.FromStart(), prefix, c.handle) }()
	go func() { _ = fan.Run(run) }()
	a.wait(t, "the follower from the earlier checkpoint")
	b.wait(t, "the follower from the later checkpoint")
	c.wait(t, "the follower from the start")
	assert.Equal(t, int64(40-29), fan.Delivered(), "the shared subscription did not read the history for the follower far behind")
	assert.Len(t, c.seen[prefix+"0"], 10, "the follower far behind got every event of its stream")
	assert.Equal(t, []uint64{8, 9}, a.seen[prefix+"0"])
}
