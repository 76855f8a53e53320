package kafka

import (
	"context"
	"log/slog"
	"slices"
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
type Lease struct {
	client *kgo.Client
	leader atomic.Bool
	done   chan struct{}
}

var _ processes.Leadership = (*Lease)(nil)

// StartLease joins the election of group; opts are extra client options
// (Security.Opts).
func StartLease(ctx context.Context, brokers []string, group string, logger *slog.Logger, opts ...kgo.Opt) (*Lease, error) {
	admin, err := NewClient(brokers, opts...)
	if err != nil {
		return nil, err
	}
	err = EnsureTopics(ctx, admin, 1, LeaseTopic)
	admin.Close()
	if err != nil {
		return nil, err
	}
	l := &Lease{done: make(chan struct{})}
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
	go func() {
		defer close(l.done)
		for {
			if f := l.client.PollFetches(ctx); f.IsClientClosed() || ctx.Err() != nil {
				return
			}
		}
	}()
	return l, nil
}

// IsLeader reports whether this process holds the lease.
func (l *Lease) IsLeader() bool { return l.leader.Load() }

// Close leaves the election.
func (l *Lease) Close() {
	l.leader.Store(false)
	l.client.Close()
	<-l.done
}
