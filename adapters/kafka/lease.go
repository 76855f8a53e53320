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
// that dies loses the lease when its group session times out
// (LeaseSessionTimeout).
//
// A leader cut off from the broker does not hear that it lost the lease
// until its client notices, which can be seconds after the coordinator gave
// the partition to another member. So a leader counts itself leader only
// until LeaseValidity after it sent the last group request the coordinator
// answered (a heartbeat, a join or a sync): the coordinator cannot expire
// its session before LeaseSessionTimeout after receiving that request,
// which is later, so the old leader stops acting at least
// LeaseSessionTimeout - LeaseValidity before any other member can start.
// Durations are measured on the one local clock, so the guarantee holds as
// long as the two machines' clocks run at about the same rate, not only
// when they agree.
//
// A member whose group requests go unanswered for LeaseRejoinAfter joins
// again as a new member, with a new client: by then the coordinator has
// expired its session (it does so LeaseSessionTimeout after the last
// request it answered), or it dropped the member from a rebalance without
// answering its join, as the embedded broker does to a member whose
// session runs out while it waits in a rebalance. Without this, such a
// member would wait for its join's answer until the client gave up, 70 s
// later, out of the election all the while: a standby that never
// takes the lease.
//
// Its lifecycle is explicit: NewLease sets it up (the topic, the client)
// under a context that only bounds the set-up; Run takes part in the
// election until its own context ends, then leaves it. In between, the
// member can stand down (leave the group, so that another member leads at
// once) and stand again (join with a new client), as a supervisor does
// while it cannot reach the event store.
type Lease struct {
	// mu guards client, the member's client while it stands (nil after
	// StandDown), and closing.
	mu      sync.Mutex
	client  *kgo.Client
	closing bool
	// clients numbers the clients made; renewals only count for the
	// newest.
	clients atomic.Uint64
	// wake tells Run that a new client stands.
	wake chan struct{}
	// tenure counts the assignments of the lease to this member.
	tenure  atomic.Uint64
	newOpts func(gen uint64) []kgo.Opt
	leader  atomic.Bool
	running atomic.Bool
	closed  sync.Once
	// answered is when (unix nanoseconds) the newest group request that
	// the coordinator answered was sent; renewed is the same once trusted
	// as a renewal of the lease.
	answered, renewed atomic.Int64
	// lapsed notes that the lease went past its validity. A
	// lapsed lease is trusted again on a new assignment, or after two
	// answered heartbeats in a row (on probation after the first): the
	// first answer after a partition may be the coordinator's refusal,
	// which the client reports only after this hook has seen the answer.
	lapsed, probation atomic.Bool
	// warned notes that the lapse was logged.
	warned atomic.Bool
	// started is when (unix nanoseconds) the newest client was made;
	// unanswered notes that the member joined again for want of answers
	// and has had none since (so that an outage logs it once).
	started    atomic.Int64
	unanswered atomic.Bool
	logger     *slog.Logger
	group      string
}

// LeaseSessionTimeout is the lease's group session timeout: how long the
// coordinator waits for a leader's heartbeat before it gives the lease to
// another member.
const LeaseSessionTimeout = 6 * time.Second

// LeaseRejoinAfter is how long a member goes without an answer to any of
// its group requests before it joins the group again as a new member. A
// member in the group is answered at every heartbeat (every second), and a
// join waits at most the rebalance timeout (LeaseSessionTimeout), which
// began before the answer that told the member to join; a heartbeat
// interval more leaves room for the round trips.
const LeaseRejoinAfter = LeaseSessionTimeout + leaseHeartbeatInterval

// LeaseValidity is how long after its last answered group request a leader
// counts itself leader: a second less than LeaseSessionTimeout, with
// heartbeats every second.
const LeaseValidity = LeaseSessionTimeout - leaseHeartbeatInterval

// leaseHeartbeatInterval is how often a member heartbeats.
const leaseHeartbeatInterval = time.Second

// renewals notes the requests that renew a member's group session, for the
// client numbered gen.
type renewals struct {
	l   *Lease
	gen uint64
}

var (
	_ kgo.HookBrokerE2E        = renewals{}
	_ kgo.HookGroupManageError = renewals{}
)

// Kafka API keys of the group requests that renew a member's session.
const (
	apiJoinGroup int16 = 11
	apiHeartbeat int16 = 12
	apiSyncGroup int16 = 14
)

// OnBrokerE2E notes when an answered JoinGroup, Heartbeat or SyncGroup
// was sent: the time the hook runs less the request's round trip.
func (r renewals) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if e2e.Err() != nil || (key != apiJoinGroup && key != apiHeartbeat && key != apiSyncGroup) || r.gen != r.l.clients.Load() {
		return
	}
	sent := time.Now().Add(-e2e.DurationE2E()).UnixNano()
	storeLater(&r.l.answered, sent)
	r.l.unanswered.Store(false)
	if r.l.lapsed.Load() || time.Since(time.Unix(0, r.l.renewed.Load())) >= LeaseValidity {
		r.l.lapsed.Store(true)
		if !r.l.probation.Swap(true) {
			return
		}
		r.l.probation.Store(false)
		r.l.lapsed.Store(false)
	}
	storeLater(&r.l.renewed, sent)
	r.l.warned.Store(false)
}

// OnGroupManageError distrusts every renewal so far: the group session may
// be gone (an unknown member, a fenced generation, a lost coordinator).
func (r renewals) OnGroupManageError(error) {
	if r.gen != r.l.clients.Load() {
		return
	}
	r.l.renewed.Store(0)
	r.l.probation.Store(false)
}

// storeLater stores t in v unless v holds a later time.
func storeLater(v *atomic.Int64, t int64) {
	for {
		prev := v.Load()
		if t <= prev || v.CompareAndSwap(prev, t) {
			return
		}
	}
}

var _ processes.Candidacy = (*Lease)(nil)

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
	l := &Lease{logger: logger, group: group, wake: make(chan struct{}, 1)}
	set := func(cl *kgo.Client, m map[string][]int32, held bool) {
		if !slices.Contains(m[LeaseTopic], 0) {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if cl != l.client {
			return // a client stood down: its lease was dropped then
		}
		if held {
			l.tenure.Add(1)
			// The assignment came in the answer to the sync just made.
			storeLater(&l.renewed, l.answered.Load())
			l.lapsed.Store(false)
			l.probation.Store(false)
			l.warned.Store(false)
		}
		if l.leader.Swap(held) != held {
			_, generation := cl.GroupMetadata()
			logger.Info("supervisor lease changed", "group", group, "leader", held, "generation", generation, "tenure", l.tenure.Load())
		}
	}
	l.newOpts = func(gen uint64) []kgo.Opt {
		return append([]kgo.Opt{
			kgo.SeedBrokers(brokers...),
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(LeaseTopic),
			kgo.SessionTimeout(LeaseSessionTimeout),
			// The members do nothing on a revoke and join again at once:
			// a rebalance need not wait the default minute for one.
			kgo.RebalanceTimeout(LeaseSessionTimeout),
			kgo.HeartbeatInterval(leaseHeartbeatInterval),
			kgo.WithHooks(renewals{l, gen}),
			kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, m map[string][]int32) { set(cl, m, true) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, m map[string][]int32) { set(cl, m, false) }),
			kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, m map[string][]int32) { set(cl, m, false) }),
		}, opts...)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.newClient(); err != nil {
		return nil, err
	}
	return l, nil
}

// newClient makes the client that joins the election and keeps it in
// client. The caller holds mu, so that the client's callbacks, which may
// come at once, see it kept.
func (l *Lease) newClient() error {
	gen := l.clients.Add(1)
	l.started.Store(time.Now().UnixNano())
	l.renewed.Store(0)
	l.lapsed.Store(false)
	l.probation.Store(false)
	c, err := kgo.NewClient(l.newOpts(gen)...)
	if err != nil {
		return errors.Wrap(err, "lease client")
	}
	l.client = c
	return nil
}

// Run takes part in the election until ctx ends or Close is called, then
// leaves the group (a successor takes over at once, without waiting for the
// session to time out). It returns nil when stopped. Call it once.
func (l *Lease) Run(ctx context.Context) error {
	if !l.running.CompareAndSwap(false, true) {
		return errors.New("lease: Run called twice")
	}
	defer l.Close()
	watching, stop := context.WithCancel(ctx)
	defer stop()
	go l.watch(watching)
	for {
		l.mu.Lock()
		c, closing := l.client, l.closing
		l.mu.Unlock()
		if closing {
			return nil
		}
		for c != nil {
			if f := c.PollFetches(ctx); f.IsClientClosed() || ctx.Err() != nil {
				break
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		// The client was closed: the member stood down, or Close was
		// called. Wait for a new one.
		select {
		case <-ctx.Done():
			return nil
		case <-l.wake:
		}
	}
}

// watch joins the group again with a new client whenever the member's
// group requests have gone unanswered for LeaseRejoinAfter, until ctx
// ends.
func (l *Lease) watch(ctx context.Context) {
	tick := time.NewTicker(leaseHeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			l.rejoinIfUnanswered()
		}
	}
}

// rejoinIfUnanswered replaces the member's client with a new one, which
// joins as a new member, when no group request of the member's has been
// answered for LeaseRejoinAfter. The member stops leading at once.
func (l *Lease) rejoinIfUnanswered() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.client == nil || l.closing {
		return // stood down, or leaving
	}
	silent := time.Since(time.Unix(0, max(l.answered.Load(), l.started.Load())))
	if silent < LeaseRejoinAfter {
		return
	}
	old := l.client
	if err := l.newClient(); err != nil {
		l.logger.Error("supervisor lease: cannot join again", "group", l.group, "err", err.Error())
		return
	}
	if !l.unanswered.Swap(true) {
		l.logger.Warn("supervisor lease: no group request answered; joining the group again as a new member",
			"group", l.group, "since_last_answer", silent.Round(time.Millisecond).String())
	}
	if l.leader.Swap(false) {
		l.logger.Info("supervisor lease changed", "group", l.group, "leader", false, "tenure", l.tenure.Load())
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
	go old.Close()
}

// Tenure numbers this member's holdings of the lease: it grows each time
// the member is assigned the lease.
func (l *Lease) Tenure() uint64 { return l.tenure.Load() }

// StandDown leaves the election: the member stops leading at once and
// leaves the group, so that another member is assigned the lease without
// waiting for the session to time out. It does not wait for the leave.
func (l *Lease) StandDown() {
	l.mu.Lock()
	c := l.client
	l.client = nil
	led := l.leader.Swap(false)
	l.mu.Unlock()
	if c == nil {
		return
	}
	l.logger.Warn("supervisor lease: standing down", "group", l.group)
	if led {
		l.logger.Info("supervisor lease changed", "group", l.group, "leader", false, "tenure", l.tenure.Load())
	}
	go c.Close()
}

// StandAgain joins the election again after StandDown, with a new client.
func (l *Lease) StandAgain() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.client != nil || l.closing {
		return
	}
	if err := l.newClient(); err != nil {
		l.logger.Error("supervisor lease: cannot stand again", "group", l.group, "err", err.Error())
		return
	}
	l.logger.Info("supervisor lease: standing again", "group", l.group)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// IsLeader reports whether this process holds the lease: it was assigned
// the lease and has renewed it within LeaseValidity.
func (l *Lease) IsLeader() bool {
	if !l.leader.Load() {
		return false
	}
	since := time.Since(time.Unix(0, l.renewed.Load()))
	if since < LeaseValidity {
		return true
	}
	l.lapsed.Store(true)
	if !l.warned.Swap(true) {
		l.logger.Warn("supervisor lease lapsed: no group request answered in time; not acting until one is",
			"group", l.group, "since_last_renewal", since.Round(time.Millisecond).String())
	}
	return false
}

// Close leaves the election. It is safe to call more than once, and with
// or without Run.
func (l *Lease) Close() {
	l.closed.Do(func() {
		l.mu.Lock()
		c := l.client
		l.client, l.closing = nil, true
		l.leader.Store(false)
		l.mu.Unlock()
		select {
		case l.wake <- struct{}{}:
		default:
		}
		if c != nil {
			c.Close()
		}
	})
}
