package esdbserver_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/secure"
)

// persubChildEnv makes the test binary serve a store for
// TestPersistentKillRedeliversFromTheLastCheckpoint until it is killed.
const persubChildEnv = "SAGA_ESDB_PERSUB_CHILD_DIR"

func init() {
	dir := os.Getenv(persubChildEnv)
	if dir == "" {
		return
	}
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(srv.Addr())
	select {}
}

func psSettings(mod func(*esdb.PersistentSubscriptionSettings)) *esdb.PersistentSubscriptionSettings {
	s := esdb.SubscriptionSettingsDefault()
	if mod != nil {
		mod(&s)
	}
	return &s
}

// psReader feeds a persistent subscription's events into a channel, so
// that tests wait for them with a timeout.
type psReader struct {
	sub *esdb.PersistentSubscription
	ch  chan *esdb.EventAppeared
}

func subscribePersistent(t *testing.T, c *esdb.Client, name, group string, buffer int32) *psReader {
	t.Helper()
	var sub *esdb.PersistentSubscription
	var err error
	opts := esdb.SubscribeToPersistentSubscriptionOptions{BufferSize: uint32(buffer)}
	if name == "$all" {
		sub, err = c.SubscribeToPersistentSubscriptionToAll(ctx(t), group, opts)
	} else {
		sub, err = c.SubscribeToPersistentSubscription(ctx(t), name, group, opts)
	}
	require.NoError(t, err)
	r := &psReader{sub: sub, ch: make(chan *esdb.EventAppeared, 1000)}
	go func() {
		defer close(r.ch)
		for {
			e := sub.Recv()
			if e.EventAppeared == nil {
				return
			}
			r.ch <- e.EventAppeared
		}
	}()
	t.Cleanup(func() { _ = sub.Close() })
	return r
}

func (r *psReader) next(t *testing.T) *esdb.EventAppeared {
	t.Helper()
	select {
	case e, ok := <-r.ch:
		require.True(t, ok, "the subscription dropped")
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
		return nil
	}
}

// awaitDrop waits until the subscription is dropped, discarding events.
func (r *psReader) awaitDrop(t *testing.T) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-r.ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the subscription was not dropped within 10 s")
		}
	}
}

func (r *psReader) nextN(t *testing.T, n int) []*esdb.EventAppeared {
	t.Helper()
	out := make([]*esdb.EventAppeared, n)
	for i := range out {
		out[i] = r.next(t)
	}
	return out
}

func info(t *testing.T, c *esdb.Client, name, group string) *esdb.PersistentSubscriptionInfo {
	t.Helper()
	got, err := c.GetPersistentSubscriptionInfo(ctx(t), name, group, esdb.GetPersistentSubscriptionOptions{})
	require.NoError(t, err)
	return got
}

func TestPersistentCreateListInfoUpdateDelete(t *testing.T) {
	embeddedOnly(t)
	tg := newTarget(t)
	c := tg.client
	name := stream("ps")
	require.NoError(t, c.CreatePersistentSubscription(ctx(t), name, "g1", esdb.PersistentStreamSubscriptionOptions{
		StartFrom: esdb.Revision(3), Settings: psSettings(func(s *esdb.PersistentSubscriptionSettings) { s.MaxRetryCount = 3 }),
	}))
	err := c.CreatePersistentSubscription(ctx(t), name, "g1", esdb.PersistentStreamSubscriptionOptions{})
	assert.Equal(t, esdb.ErrorCodeResourceAlreadyExists, code(err), "a group is created once")
	require.NoError(t, c.CreatePersistentSubscriptionToAll(ctx(t), "g-all", esdb.PersistentAllSubscriptionOptions{
		Filter: &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{"ps-"}},
	}))

	got := info(t, c, name, "g1")
	assert.Equal(t, name, got.EventSource)
	assert.Equal(t, int32(3), got.Settings.MaxRetryCount)
	assert.Equal(t, esdb.Revision(3), got.Settings.StartFrom)
	assert.Equal(t, esdb.ConsumerStrategyRoundRobin, got.Settings.ConsumerStrategyName)

	require.NoError(t, c.UpdatePersistentSubscription(ctx(t), name, "g1", esdb.PersistentStreamSubscriptionOptions{
		StartFrom: esdb.Start{}, Settings: psSettings(func(s *esdb.PersistentSubscriptionSettings) {
			s.MaxRetryCount = 7
			s.ConsumerStrategyName = esdb.ConsumerStrategyPinned
		}),
	}))
	err = c.UpdatePersistentSubscription(ctx(t), name, "missing", esdb.PersistentStreamSubscriptionOptions{})
	assert.Equal(t, esdb.ErrorCodeResourceNotFound, code(err))

	// The settings survive a restart.
	tg.restart()
	c = tg.client
	got = info(t, c, name, "g1")
	assert.Equal(t, int32(7), got.Settings.MaxRetryCount)
	assert.Equal(t, esdb.ConsumerStrategyPinned, got.Settings.ConsumerStrategyName)
	all, err := c.GetPersistentSubscriptionInfoToAll(ctx(t), "g-all", esdb.GetPersistentSubscriptionOptions{})
	require.NoError(t, err)
	assert.Equal(t, "$all", all.EventSource)

	list, err := c.ListAllPersistentSubscriptions(ctx(t), esdb.ListPersistentSubscriptionsOptions{})
	require.NoError(t, err)
	assert.Len(t, list, 2)
	list, err = c.ListPersistentSubscriptionsForStream(ctx(t), name, esdb.ListPersistentSubscriptionsOptions{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "g1", list[0].GroupName)
	list, err = c.ListPersistentSubscriptionsToAll(ctx(t), esdb.ListPersistentSubscriptionsOptions{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "g-all", list[0].GroupName)

	require.NoError(t, c.DeletePersistentSubscription(ctx(t), name, "g1", esdb.DeletePersistentSubscriptionOptions{}))
	err = c.DeletePersistentSubscription(ctx(t), name, "g1", esdb.DeletePersistentSubscriptionOptions{})
	assert.Equal(t, esdb.ErrorCodeResourceNotFound, code(err), "a deleted group is gone")
	_, err = c.GetPersistentSubscriptionInfo(ctx(t), name, "g1", esdb.GetPersistentSubscriptionOptions{})
	assert.Equal(t, esdb.ErrorCodeResourceNotFound, code(err))
	require.NoError(t, c.DeletePersistentSubscriptionToAll(ctx(t), "g-all", esdb.DeletePersistentSubscriptionOptions{}))
	tg.restart()
	list, err = tg.client.ListAllPersistentSubscriptions(ctx(t), esdb.ListPersistentSubscriptionsOptions{})
	require.NoError(t, err)
	assert.Empty(t, list, "deletes survive a restart")
}

func TestPersistentAllFilterDeliversOnlyMatchingStreams(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	prefix := stream("keep") + "-"
	require.NoError(t, c.CreatePersistentSubscriptionToAll(ctx(t), "g", esdb.PersistentAllSubscriptionOptions{
		Filter: &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{prefix}},
	}))
	r := subscribePersistent(t, c, "$all", "g", 10)
	_, err := c.AppendToStream(ctx(t), stream("drop"), esdb.AppendToStreamOptions{}, events(3, "E")...)
	require.NoError(t, err)
	_, err = c.AppendToStream(ctx(t), prefix+"a", esdb.AppendToStreamOptions{}, events(2, "E")...)
	require.NoError(t, err)
	for _, e := range r.nextN(t, 2) {
		assert.Equal(t, prefix+"a", e.Event.OriginalEvent().StreamID)
		require.NoError(t, r.sub.Ack(e.Event))
	}
}

func TestPersistentAckNackParkAndReplayParked(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	name := stream("park")
	require.NoError(t, c.CreatePersistentSubscription(ctx(t), name, "g", esdb.PersistentStreamSubscriptionOptions{
		Settings: psSettings(func(s *esdb.PersistentSubscriptionSettings) { s.MaxRetryCount = 1 }),
	}))
	r := subscribePersistent(t, c, name, "g", 10)
	_, err := c.AppendToStream(ctx(t), name, esdb.AppendToStreamOptions{}, events(4, "E")...)
	require.NoError(t, err)
	got := r.nextN(t, 4)
	for i, e := range got {
		require.Equal(t, uint64(i), e.Event.OriginalEvent().EventNumber)
		require.Equal(t, 0, e.RetryCount)
	}
	require.NoError(t, r.sub.Ack(got[0].Event))
	require.NoError(t, r.sub.Nack("later", esdb.NackActionRetry, got[1].Event))
	require.NoError(t, r.sub.Nack("poison", esdb.NackActionPark, got[2].Event))
	require.NoError(t, r.sub.Nack("ignore", esdb.NackActionSkip, got[3].Event))
	again := r.next(t)
	require.Equal(t, uint64(1), again.Event.OriginalEvent().EventNumber, "a retried message comes back")
	require.Equal(t, 1, again.RetryCount)
	require.NoError(t, r.sub.Nack("still later", esdb.NackActionRetry, again.Event))

	require.Eventually(t, func() bool {
		return info(t, c, name, "g").Stats.ParkedMessagesCount == 2
	}, 10*time.Second, 20*time.Millisecond, "past max_retry_count a message is parked, as one nacked with park")
	parked, err := readStream(t, c, "$persistentsubscription-"+name+"::g-parked", esdb.ReadStreamOptions{}, 10)
	require.NoError(t, err)
	require.Len(t, parked, 2)
	assert.Equal(t, "$>", parked[0].Event.EventType)
	assert.Equal(t, fmt.Sprintf("2@%s", name), string(parked[0].Event.Data), "the parked stream links to the event")

	require.NoError(t, c.ReplayParkedMessages(ctx(t), name, "g", esdb.ReplayParkedMessagesOptions{}))
	replayed := r.nextN(t, 2)
	assert.ElementsMatch(t, []uint64{1, 2}, []uint64{replayed[0].Event.OriginalEvent().EventNumber, replayed[1].Event.OriginalEvent().EventNumber})
	require.NoError(t, r.sub.Ack(replayed[0].Event, replayed[1].Event))
	require.Eventually(t, func() bool {
		return info(t, c, name, "g").Stats.ParkedMessagesCount == 0
	}, 10*time.Second, 20*time.Millisecond, "replayed and acked messages leave the parked stream")

	if tg.server == nil {
		return
	}
	// After a restart the truncated parked stream counts only what is
	// parked after it.
	tg.restart()
	c = tg.client
	assert.Equal(t, int64(0), info(t, c, name, "g").Stats.ParkedMessagesCount)
	r = subscribePersistent(t, c, name, "g", 10)
	_, err = c.AppendToStream(ctx(t), name, esdb.AppendToStreamOptions{}, events(1, "E")...)
	require.NoError(t, err)
	e := r.next(t)
	require.Equal(t, uint64(4), e.Event.OriginalEvent().EventNumber)
	require.NoError(t, r.sub.Nack("poison", esdb.NackActionPark, e.Event))
	require.Eventually(t, func() bool {
		return info(t, c, name, "g").Stats.ParkedMessagesCount == 1
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, c.ReplayParkedMessages(ctx(t), name, "g", esdb.ReplayParkedMessagesOptions{}))
	assert.Equal(t, uint64(4), r.next(t).Event.OriginalEvent().EventNumber, "only the new parked message is replayed")
}

func TestPersistentRoundRobinSharesMessages(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	name := stream("rr")
	require.NoError(t, c.CreatePersistentSubscription(ctx(t), name, "g", esdb.PersistentStreamSubscriptionOptions{}))
	a := subscribePersistent(t, c, name, "g", 10)
	b := subscribePersistent(t, c, name, "g", 10)
	_, err := c.AppendToStream(ctx(t), name, esdb.AppendToStreamOptions{}, events(10, "E")...)
	require.NoError(t, err)
	seen := map[uint64]int{}
	for _, r := range []*psReader{a, b} {
		for _, e := range r.nextN(t, 5) {
			seen[e.Event.OriginalEvent().EventNumber]++
			require.NoError(t, r.sub.Ack(e.Event))
		}
	}
	assert.Len(t, seen, 10, "each message goes to one consumer, and each consumer gets half")
}

func TestPersistentDispatchToSingleAndPinned(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	name := stream("single")
	require.NoError(t, c.CreatePersistentSubscription(ctx(t), name, "g", esdb.PersistentStreamSubscriptionOptions{
		Settings: psSettings(func(s *esdb.PersistentSubscriptionSettings) {
			s.ConsumerStrategyName = esdb.ConsumerStrategyDispatchToSingle
		}),
	}))
	a := subscribePersistent(t, c, name, "g", 10)
	b := subscribePersistent(t, c, name, "g", 10)
	_, err := c.AppendToStream(ctx(t), name, esdb.AppendToStreamOptions{}, events(5, "E")...)
	require.NoError(t, err)
	for _, e := range a.nextN(t, 5) {
		require.NoError(t, a.sub.Ack(e.Event))
	}
	assert.Empty(t, b.ch, "dispatch-to-single fills the first consumer first")

	require.NoError(t, c.CreatePersistentSubscriptionToAll(ctx(t), "pinned", esdb.PersistentAllSubscriptionOptions{
		StartFrom: esdb.End{},
		Filter:    &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{"pin-"}},
		Settings:  psSettings(func(s *esdb.PersistentSubscriptionSettings) { s.ConsumerStrategyName = esdb.ConsumerStrategyPinned }),
	}))
	p1 := subscribePersistent(t, c, "$all", "pinned", 100)
	p2 := subscribePersistent(t, c, "$all", "pinned", 100)
	streams := []string{stream("pin"), stream("pin"), stream("pin"), stream("pin")}
	for _, s := range streams {
		_, err := c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{}, events(3, "E")...)
		require.NoError(t, err)
	}
	owner := map[string]*psReader{}
	for n := 0; n < 12; n++ {
		var e *esdb.EventAppeared
		var from *psReader
		select {
		case e = <-p1.ch:
			from = p1
		case e = <-p2.ch:
			from = p2
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10 s")
		}
		s := e.Event.OriginalEvent().StreamID
		if owner[s] == nil {
			owner[s] = from
		}
		assert.Same(t, owner[s], from, "every event of %s goes to the same consumer", s)
		require.NoError(t, from.sub.Ack(e.Event))
	}
}

func TestPersistentMessageTimeoutRetries(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	name := stream("timeout")
	require.NoError(t, c.CreatePersistentSubscription(ctx(t), name, "g", esdb.PersistentStreamSubscriptionOptions{
		Settings: psSettings(func(s *esdb.PersistentSubscriptionSettings) { s.MessageTimeout = 100 }),
	}))
	r := subscribePersistent(t, c, name, "g", 10)
	_, err := c.AppendToStream(ctx(t), name, esdb.AppendToStreamOptions{}, events(1, "E")...)
	require.NoError(t, err)
	first := r.next(t)
	assert.Equal(t, 0, first.RetryCount)
	again := r.next(t)
	assert.Equal(t, first.Event.OriginalEvent().EventID, again.Event.OriginalEvent().EventID, "an unacked message is retried after its timeout")
	assert.Equal(t, 1, again.RetryCount)
	require.NoError(t, r.sub.Ack(again.Event))
}

func TestPersistentResumesFromCheckpointAfterRestart(t *testing.T) {
	embeddedOnly(t)
	tg := newTarget(t)
	name := stream("resume")
	require.NoError(t, tg.client.CreatePersistentSubscription(ctx(t), name, "g", esdb.PersistentStreamSubscriptionOptions{
		Settings: psSettings(func(s *esdb.PersistentSubscriptionSettings) { s.CheckpointAfter = 60_000 }),
	}))
	_, err := tg.client.AppendToStream(ctx(t), name, esdb.AppendToStreamOptions{}, events(10, "E")...)
	require.NoError(t, err)
	r := subscribePersistent(t, tg.client, name, "g", 10)
	got := r.nextN(t, 10)
	for _, e := range got[:5] {
		require.NoError(t, r.sub.Ack(e.Event))
	}
	require.Eventually(t, func() bool {
		return info(t, tg.client, name, "g").Stats.TotalItems == 5
	}, 10*time.Second, 20*time.Millisecond)
	// A graceful stop writes the checkpoint however few acks it holds.
	tg.restart()
	r = subscribePersistent(t, tg.client, name, "g", 10)
	for i, e := range r.nextN(t, 5) {
		assert.Equal(t, uint64(5+i), e.Event.OriginalEvent().EventNumber, "delivery resumes after the last ack")
	}
}

// TestPersistentKillRedeliversFromTheLastCheckpoint kills a server with
// SIGKILL after acks past its last checkpoint: after the restart delivery
// resumes right after that checkpoint, so no checkpointed ack is lost and
// the acks since are redelivered, with every later event.
func TestPersistentKillRedeliversFromTheLastCheckpoint(t *testing.T) {
	embeddedOnly(t)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), persubChildEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	require.True(t, lines.Scan())
	c := connect(t, fmt.Sprintf("esdb://%s?tls=false", lines.Text()))

	name := stream("kill")
	require.NoError(t, c.CreatePersistentSubscription(ctx(t), name, "g", esdb.PersistentStreamSubscriptionOptions{
		Settings: psSettings(func(s *esdb.PersistentSubscriptionSettings) {
			s.CheckpointLowerBound, s.CheckpointUpperBound, s.CheckpointAfter = 5, 5, 60_000
		}),
	}))
	_, err = c.AppendToStream(ctx(t), name, esdb.AppendToStreamOptions{}, events(20, "E")...)
	require.NoError(t, err)
	r := subscribePersistent(t, c, name, "g", 20)
	got := r.nextN(t, 20)
	// Acks in batches of 5, each checkpointed before the next is sent.
	for _, last := range []int{4, 9} {
		for _, e := range got[last-4 : last+1] {
			require.NoError(t, r.sub.Ack(e.Event))
		}
		require.Eventually(t, func() bool {
			rev := info(t, c, name, "g").Stats.LastCheckpointedEventRevision
			return rev != nil && *rev == uint64(last)
		}, 10*time.Second, 20*time.Millisecond, "every 5 acks are checkpointed")
	}
	// Three acks past the checkpoint, fewer than the 5 that write one.
	for _, e := range got[10:13] {
		require.NoError(t, r.sub.Ack(e.Event))
	}
	require.Eventually(t, func() bool {
		return info(t, c, name, "g").Stats.TotalItems == 13
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, c.Close())
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	c = connect(t, fmt.Sprintf("esdb://%s?tls=false", srv.Addr()))
	t.Cleanup(func() { _ = c.Close() })
	rev := info(t, c, name, "g").Stats.LastCheckpointedEventRevision
	require.NotNil(t, rev)
	assert.Equal(t, uint64(9), *rev, "the checkpoint written before the kill is kept")
	r = subscribePersistent(t, c, name, "g", 20)
	for i, e := range r.nextN(t, 10) {
		assert.Equal(t, uint64(10+i), e.Event.OriginalEvent().EventNumber,
			"everything after the checkpoint is redelivered, the 3 acks since included, and nothing before it")
		assert.Equal(t, got[10+i].Event.OriginalEvent().EventID, e.Event.OriginalEvent().EventID)
	}
}

// TestPersistentSecureRules: on a secure server a user outside $admins
// may use groups on its streams but not on $all or system streams, nor
// restart the subsystem.
func TestPersistentSecureRules(t *testing.T) {
	files, err := secure.Prepare(filepath.Join(t.TempDir(), "secure"))
	require.NoError(t, err)
	tlsCfg, err := files.ServerTLS()
	require.NoError(t, err)
	hash, err := esdbserver.HashPassword("pw")
	require.NoError(t, err)
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), TLS: tlsCfg,
		Users: []esdbserver.User{{Name: "ops", Hash: hash}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	c := connect(t, "esdb://ops:pw@"+srv.Addr()+"?tls=true&tlsCAFile="+files.CA)
	t.Cleanup(func() { _ = c.Close() })

	require.NoError(t, c.CreatePersistentSubscription(ctx(t), "orders", "g", esdb.PersistentStreamSubscriptionOptions{}))
	err = c.CreatePersistentSubscriptionToAll(ctx(t), "g", esdb.PersistentAllSubscriptionOptions{})
	assert.Equal(t, esdb.ErrorCodeAccessDenied, code(err), "$all is for admins")
	err = c.CreatePersistentSubscription(ctx(t), "$system", "g", esdb.PersistentStreamSubscriptionOptions{})
	assert.Equal(t, esdb.ErrorCodeAccessDenied, code(err), "system streams are for admins")
	err = c.RestartPersistentSubscriptionSubsystem(ctx(t), esdb.RestartPersistentSubscriptionSubsystemOptions{})
	assert.Equal(t, esdb.ErrorCodeAccessDenied, code(err))
}

// TestPersistentRestartSubsystemAndUpdateDropConsumers: both drop the
// group's consumers, which reconnect and get what was not acked.
func TestPersistentRestartSubsystemAndUpdateDropConsumers(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	name := stream("restart")
	require.NoError(t, c.CreatePersistentSubscription(ctx(t), name, "g", esdb.PersistentStreamSubscriptionOptions{}))
	_, err := c.AppendToStream(ctx(t), name, esdb.AppendToStreamOptions{}, events(3, "E")...)
	require.NoError(t, err)
	r := subscribePersistent(t, c, name, "g", 10)
	got := r.nextN(t, 3)
	require.NoError(t, r.sub.Ack(got[0].Event))
	require.Eventually(t, func() bool {
		return info(t, c, name, "g").Stats.TotalItems == 1
	}, 10*time.Second, 20*time.Millisecond)

	require.NoError(t, c.RestartPersistentSubscriptionSubsystem(ctx(t), esdb.RestartPersistentSubscriptionSubsystemOptions{}))
	r.awaitDrop(t)
	r = subscribePersistent(t, c, name, "g", 10)
	again := r.nextN(t, 2)
	assert.Equal(t, uint64(1), again[0].Event.OriginalEvent().EventNumber, "what was not acked comes again")
	require.NoError(t, r.sub.Ack(again[0].Event))
	require.Eventually(t, func() bool {
		return info(t, c, name, "g").Stats.TotalItems == 1
	}, 10*time.Second, 20*time.Millisecond)

	require.NoError(t, c.UpdatePersistentSubscription(ctx(t), name, "g", esdb.PersistentStreamSubscriptionOptions{
		Settings: psSettings(func(s *esdb.PersistentSubscriptionSettings) { s.MaxRetryCount = 2 }),
	}))
	r.awaitDrop(t)
	r = subscribePersistent(t, c, name, "g", 10)
	assert.Equal(t, uint64(2), r.next(t).Event.OriginalEvent().EventNumber)
	assert.Equal(t, int32(2), info(t, c, name, "g").Settings.MaxRetryCount)
}

// TestPersistentConsumersAreBounded: --max-subscriptions bounds the
// consumers of persistent subscriptions too.
func TestPersistentConsumersAreBounded(t *testing.T) {
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), MaxSubscriptions: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	c := connect(t, fmt.Sprintf("esdb://%s?tls=false", srv.Addr()))
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.CreatePersistentSubscription(ctx(t), "s", "g", esdb.PersistentStreamSubscriptionOptions{}))
	subscribePersistent(t, c, "s", "g", 10)
	_, err = c.SubscribeToPersistentSubscription(ctx(t), "s", "g", esdb.SubscribeToPersistentSubscriptionOptions{})
	require.Error(t, err, "one consumer more than the limit is refused")
	assert.Contains(t, err.Error(), "--max-subscriptions")
}
