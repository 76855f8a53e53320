package kafka

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/processes"
)

// LeaseTopic is the one-partition topic whose consumer group elects the
// acting supervisor.
const LeaseTopic = "saga.supervisor.lease"

// Lease elects one leader among processes: they join a consumer group on a
// one-partition topic, and the member assigned partition 0 leads. A leader
// that dies loses the lease when its group session times out (6 s).
//
// Its lifecycle is explicit: NewLease sets it up (the topic, the client)
// under a context that only bounds the set-up; Run takes part in the
// election until its own context ends, then leaves it.
type Lease struct {
	client  *kgo.Client
	leader  atomic.Bool
	running atomic.Bool
	closed  sync.Once
}

var _ processes.Leadership = (*Lease)(nil)

// NewLease sets up the election of group: it creates LeaseTopic if it is
// missing and builds the member's client; ctx bounds only the set-up. opts
// are extra client options (Security.Opts). Call Run to take part.
func NewLease(ctx context.Context, brokers []string, group string, logger *slog.Logger, opts ...kgo.Opt) (*Lease, error) {
	admin, err := NewClient(brokers, opts...)
	if err != nil {
		return nil, err
	}
	err = EnsureTopics(ctx, admin, 1, LeaseTopic)
	admin.Close()
	if err != nil {
		return nil, err
	}
	l := &Lease{}
	set := func(m map[string][]int32, held bool) {
		if slices.Contains(m[LeaseTopic], 0) && l.leader.Swap(held) != held {
			logger.Info("supervisor lease changed", "group", group, "leader", held)
		}
	}
	l.client, err = kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(LeaseTopic),
		kgo.SessionTimeout(6 * time.Second),
		kgo.HeartbeatInterval(time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { set(m, true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { set(m, false) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { set(m, false) }),
	}, opts...)...)
	if err != nil {
		return nil, errors.Wrap(err, "lease client")
	}
	return l, nil
}

// Run takes part in the election until ctx ends or Close is called, then
// leaves the group (a successor takes over at once, without waiting for the
// session to time out). It returns nil when stopped. Call it once.
func (l *Lease) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		return errors.New("lease: Run called twice")
	}
	defer l.Close()
	for {
		if f := l.client.PollFetches(ctx); f.IsClientClosed() || ctx.Err() != nil {
			return nil
		}
	}
}

// IsLeader reports whether this process holds the lease.
func (l *Lease) IsLeader() bool { return l.leader.Load() }

// Close leaves the election. It is safe to call more than once, and with
// or without Run.
func (l *Lease) Close() {
	l.closed.Do(func() {
		l.leader.Store(false)
		l.client.Close()
	})
}
