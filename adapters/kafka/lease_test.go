package kafka_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
)

// TestLeaseIsHandedOverWhenTheLeaderStops runs two members of one election
// against the in-process broker: exactly one leads, and once the leader's
// Run ends (its process stops) the other takes over, without waiting for
// the session to time out.
func TestLeaseIsHandedOverWhenTheLeaderStops(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 1, Logger: logger})
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

// TestLeaseLapsesBeforeItCanBeGivenAway cuts the leader off from the group
// coordinator (its heartbeats go unanswered, as in a network partition)
// and watches both members throughout: the old leader stops counting
// itself leader before the coordinator can give the lease to the other,
// so at no moment do both lead.
func TestLeaseLapsesBeforeItCanBeGivenAway(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, kafka.LeaseTopic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	setup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var leases [2]*kafka.Lease
	for i := range leases {
		l, err := kafka.NewLease(setup, cluster.ListenAddrs(), "lease-partition", logger)
		require.NoError(t, err)
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = l.Run(ctx) }()
		t.Cleanup(func() { stop(); <-done })
		leases[i] = l
	}
	var leader int
	require.Eventually(t, func() bool {
		a, b := leases[0].IsLeader(), leases[1].IsLeader()
		leader = map[bool]int{true: 0, false: 1}[a]
		return a != b
	}, 30*time.Second, 10*time.Millisecond, "one member leads")
	other := 1 - leader

	cutOff := kafka.LeaseMemberID(leases[leader])
	require.NotEmpty(t, cutOff)
	cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if req.(*kmsg.HeartbeatRequest).MemberID == cutOff {
			return nil, nil, true // no answer, as across a partition
		}
		return nil, nil, false
	})
	began := time.Now()
	overlaps, oldLeaderStopped := 0, time.Duration(0)
	require.Eventually(t, func() bool {
		old, successor := leases[leader].IsLeader(), leases[other].IsLeader()
		if old && successor {
			overlaps++
		}
		if !old && oldLeaderStopped == 0 {
			oldLeaderStopped = time.Since(began)
		}
		return successor
	}, 60*time.Second, time.Millisecond, "the other member takes the lease over")
	t.Logf("old leader stopped after %s, successor took over after %s", oldLeaderStopped.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	assert.Zero(t, overlaps, "both members counted themselves leader at once")
	assert.False(t, leases[leader].IsLeader(), "the cut-off member does not lead")
}

// TestALeaseStandsDownAndAgain runs two members of one election on kfake.
// The leader stands down (as a supervisor cut off from the event store
// does): it stops leading at once and the other takes the lease without
// waiting for a session to time out. It stands again, and leads once the
// other stands down in turn. Each new holder has a new tenure, the group's
// generation grows from one leader to the next, and at no moment do both
// lead.
func TestALeaseStandsDownAndAgain(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, kafka.LeaseTopic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	setup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var leases [2]*kafka.Lease
	for i := range leases {
		l, err := kafka.NewLease(setup, cluster.ListenAddrs(), "lease-stand-down", logger)
		require.NoError(t, err)
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = l.Run(ctx) }()
		t.Cleanup(func() { stop(); <-done })
		leases[i] = l
	}
	overlaps := 0
	// leads waits until member i alone leads, watching for overlaps.
	leads := func(i int, what string) {
		t.Helper()
		require.Eventually(t, func() bool {
			a, b := leases[i].IsLeader(), leases[1-i].IsLeader()
			if a && b {
				overlaps++
			}
			return a && !b
		}, 30*time.Second, time.Millisecond, what)
	}
	var first int
	require.Eventually(t, func() bool {
		a, b := leases[0].IsLeader(), leases[1].IsLeader()
		first = map[bool]int{true: 0, false: 1}[a]
		return a != b
	}, 30*time.Second, 10*time.Millisecond, "one member leads")
	second := 1 - first
	generations := []int32{kafka.LeaseGeneration(leases[first])}
	assert.EqualValues(t, 1, leases[first].Tenure())

	began := time.Now()
	leases[first].StandDown()
	assert.False(t, leases[first].IsLeader(), "a member that stood down stops leading at once")
	leads(second, "the other member takes the lease")
	handedOver := time.Since(began)
	assert.Less(t, handedOver, kafka.LeaseSessionTimeout, "without waiting for the session to time out")
	generations = append(generations, kafka.LeaseGeneration(leases[second]))
	assert.EqualValues(t, 1, leases[second].Tenure())

	leases[first].StandAgain()
	require.Eventually(t, func() bool { return kafka.LeaseGeneration(leases[first]) > generations[1] }, 30*time.Second, 10*time.Millisecond,
		"the member that stood again joins the group")
	leases[second].StandDown()
	leads(first, "the member that stood again leads once the other stands down")
	generations = append(generations, kafka.LeaseGeneration(leases[first]))
	assert.EqualValues(t, 2, leases[first].Tenure(), "a new tenure")

	assert.Zero(t, overlaps, "both members counted themselves leader at once")
	assert.IsIncreasing(t, generations, "the group's generation grows from one leader to the next")
	t.Logf("handed over in %s; generations %v", handedOver.Round(time.Millisecond), generations)
}

// TestAMemberDroppedFromARebalanceJoinsAgain kills a third member of the
// election (its process dies: it stays in the group, silent, until its
// session times out) and starts a new one (the process restarted), so
// that the two members left wait in a rebalance for the dead one. The
// group coordinator expires a member waiting in that rebalance by its own
// session, without answering its join: kfake, the embedded broker, does
// (a member waiting in JoinGroup keeps its session timer, and a
// SIGSTOPped broker fires every timer at once on SIGCONT); here the dead
// member's session is longer than theirs, so it happens every time. The
// members left must notice and join again, so that the election goes on:
// once the dead member has expired, all three are in the group, one
// leads, and when it stands down another takes over at once. A member
// that waited for its join's answer instead (for the client's rebalance
// timeout plus its request overhead: 70 seconds) stood out of the
// election all that time.
func TestAMemberDroppedFromARebalanceJoinsAgain(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, kafka.LeaseTopic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	const group = "lease-rebalance"
	start := func() *kafka.Lease {
		setup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := kafka.NewLease(setup, cluster.ListenAddrs(), group, logger)
		require.NoError(t, err)
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = l.Run(ctx) }()
		t.Cleanup(func() { stop(); <-done })
		return l
	}
	a, b := start(), start()
	require.Eventually(t, func() bool { return a.IsLeader() != b.IsLeader() }, 30*time.Second, 10*time.Millisecond, "one member leads")

	// The member to kill, with a session longer than the lease's.
	deadSession := kafka.LeaseSessionTimeout + 4*time.Second
	dead, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(kafka.LeaseTopic), kgo.SessionTimeout(deadSession), kgo.HeartbeatInterval(time.Second))
	require.NoError(t, err)
	polling, stopPolling := context.WithCancel(context.Background())
	go func() {
		for polling.Err() == nil {
			dead.PollFetches(polling)
		}
	}()
	require.Eventually(t, func() bool {
		_, g := dead.GroupMetadata()
		return g > 0 && kafka.LeaseGeneration(a) == g && kafka.LeaseGeneration(b) == g
	}, 30*time.Second, 10*time.Millisecond, "the third member joins")
	deadID, _ := dead.GroupMetadata()
	// kill -9: nothing it sends reaches the coordinator any more.
	for _, key := range []kmsg.Key{kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.LeaveGroup, kmsg.OffsetCommit} {
		cluster.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
			cluster.KeepControl()
			var member string
			switch r := req.(type) {
			case *kmsg.HeartbeatRequest:
				member = r.MemberID
			case *kmsg.JoinGroupRequest:
				member = r.MemberID
			case *kmsg.SyncGroupRequest:
				member = r.MemberID
			case *kmsg.LeaveGroupRequest:
				for _, m := range r.Members {
					member = m.MemberID
				}
			case *kmsg.OffsetCommitRequest:
				member = r.MemberID
			}
			return nil, nil, member == deadID
		})
	}
	stopPolling()
	go dead.Close()
	killed := time.Now()

	restarted := start()
	members := []*kafka.Lease{a, b, restarted}
	// Once the dead member expired, the three live ones are in one
	// generation, and exactly one leads.
	require.Eventually(t, func() bool {
		g := kafka.LeaseGeneration(a)
		leaders := 0
		for _, m := range members {
			if kafka.LeaseGeneration(m) != g {
				return false
			}
			if m.IsLeader() {
				leaders++
			}
		}
		return leaders == 1
	}, deadSession+kafka.LeaseRejoinAfter, 10*time.Millisecond, "every live member is back in the election")
	t.Logf("all three in one generation %s after the kill", time.Since(killed).Round(time.Millisecond))

	var leader *kafka.Lease
	for _, m := range members {
		if m.IsLeader() {
			leader = m
		}
	}
	handover := time.Now()
	leader.StandDown()
	require.Eventually(t, func() bool {
		for _, m := range members {
			if m != leader && m.IsLeader() {
				return true
			}
		}
		return false
	}, kafka.LeaseSessionTimeout, 10*time.Millisecond, "another member takes the lease when the leader stands down")
	t.Logf("handed over in %s", time.Since(handover).Round(time.Millisecond))
}
