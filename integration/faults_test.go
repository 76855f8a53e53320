package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
	"github.com/sagaengine/saga/projections"
)

// The fault-injection suite: each test reproduces one finding of the trust
// audit and shows the behaviour that replaced it.

// startStore starts an event-store server of the test's own, so that the
// test can stop, restart and limit it.
func startStore(t *testing.T, addr, dir string, maxEvent int) *esdbserver.Server {
	t.Helper()
	srv, err := esdbserver.Start(esdbserver.Config{Listen: addr, DataDir: dir, MaxEventSize: maxEvent, Logger: testLogger()})
	require.NoError(t, err)
	return srv
}

// deadLetters reads n dead letters and returns their reasons by key.
func (s *system) deadLetters(n int) map[string]string {
	s.t.Helper()
	reasons := map[string]string{}
	for _, r := range s.consumeTopic(protocol.DeadLetterTopic, n, 30*time.Second) {
		for _, h := range r.Headers {
			if h.Key == kafka.HeaderDeadLetterReason {
				reasons[string(r.Key)] = string(h.Value)
			}
		}
	}
	return reasons
}

// readyz answers GET /readyz: the status code and the failing checks.
func (s *system) readyz() (int, map[string]string) {
	s.t.Helper()
	resp, err := http.Get("http://" + s.app.HTTPAddr + "/readyz")
	require.NoError(s.t, err)
	defer resp.Body.Close()
	var body struct {
		Checks []struct {
			Name, Error string
			OK          bool
		}
	}
	require.NoError(s.t, json.NewDecoder(resp.Body).Decode(&body))
	failing := map[string]string{}
	for _, c := range body.Checks {
		if !c.OK {
			failing[c.Name] = c.Error
		}
	}
	return resp.StatusCode, failing
}

// awaitStatus reads topic until it carries a status of order in state.
func (s *system) awaitStatus(topic, order string, state domain.TaskState) {
	s.t.Helper()
	require.True(s.t, s.statusArrives(topic, order, state, 30*time.Second), "no %s status of %s on %s", state, order, topic)
}

// statusArrives reads topic for up to wait and reports whether it carried a
// status of order in state.
func (s *system) statusArrives(topic, order string, state domain.TaskState, wait time.Duration) bool {
	s.t.Helper()
	client, err := kgo.NewClient(kgo.SeedBrokers(s.app.KafkaBrokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(s.t, err)
	defer client.Close()
	c, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for c.Err() == nil {
		for _, r := range client.PollFetches(c).Records() {
			if st, err := protocol.ParseTaskStatus(r.Value); err == nil && st.OrderID == order && st.State == state {
				return true
			}
		}
	}
	return false
}

// Item 4: one follower of the shared subscription that fails, and one that
// hangs with a full queue, used to freeze every other follower. Here a
// follower that fails and one that hangs share a fan-out with a task
// projection: the projection sees every order through to the end, the
// hanging one is reported stalled, and the system's own scheduler keeps
// moving.
func TestFaultFanoutKeepsFollowersMovingPastAStuckOne(t *testing.T) {
	s := startSystem(t, engine.Config{})
	fan := eventstore.NewFanout(s.app.Store, domain.TaskStreamPrefix)
	fan.QueueSize, fan.DetachAfter, fan.StallAfter = 4, 50*time.Millisecond, 100*time.Millisecond
	failing, stuck, view := fan.Register("failing"), fan.Register("stuck"), projections.NewTasks(testLogger())
	viewFeed := fan.Register("projection")
	c, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	t.Cleanup(func() { close(release); cancel() })
	go func() {
		_ = failing.SubscribeAll(c, domain.FromStart(), domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
			if it.Event != nil {
				return fmt.Errorf("status sink refused")
			}
			return nil
		})
	}()
	go func() {
		_ = stuck.SubscribeAll(c, domain.FromStart(), domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
			if it.Event != nil {
				<-release
			}
			return nil
		})
	}()
	go func() { _ = view.Run(c, viewFeed) }()
	go func() { _ = fan.Run(c) }()

	ids := orderIDs("fan", 20)
	s.publishOrders(ids)
	s.awaitTerminal(ids, 60*time.Second)
	require.Eventually(t, func() bool {
		return view.Counts()[domain.StateProcessed] == len(ids)
	}, 30*time.Second, 10*time.Millisecond, "the projection on the shared fan-out sees every order processed")
	require.Eventually(t, func() bool { return len(fan.Stalled()) > 0 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, []string{"stuck"}, fan.Stalled())
	assert.Equal(t, eventstore.FanoutStats{Detached: 1, Failed: 1}, fan.Stats())
}

// Item 6: a huge traceparent was stored twice, and an append the store
// refuses was retried forever, holding up its partition. Here a 9 MiB
// traceparent is replaced by a new trace, an order too large for the store
// is dead-lettered with the reason, and the order after both is processed.
func TestFaultPoisonOrdersAreDeadLettered(t *testing.T) {
	srv := startStore(t, "127.0.0.1:0", t.TempDir(), 256<<10)
	t.Cleanup(func() { _ = srv.Close() })
	s := startSystem(t, engine.Config{EventStoreURL: fmt.Sprintf("esdb://%s?tls=false", srv.Addr())})

	client := s.producer()
	huge := &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte("poison-trace"), Value: []byte(`{"orderId":"poison-trace"}`),
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + strings.Repeat("a", 9<<20))}}}
	big := &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte("poison-big"),
		Value: []byte(`{"orderId":"poison-big","pad":"` + strings.Repeat("x", 512<<10) + `"}`)}
	after := &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte("poison-after"), Value: []byte(`{"orderId":"poison-after"}`)}
	for _, r := range []*kgo.Record{huge, big, after} {
		r.Partition = 0 // one partition: "after" waits behind the poison ones
	}
	require.NoError(t, client.ProduceSync(ctx(t, 30*time.Second), huge, big, after).FirstErr())

	s.awaitTerminal([]string{"poison-trace", "poison-after"}, 60*time.Second)
	reasons := s.deadLetters(1)
	assert.Contains(t, reasons["poison-big"], domain.ErrAppendRefused.Error())
	first := s.stream("poison-trace")[0]
	assert.True(t, processes.ValidTraceParent(first.Metadata.TraceParent), "a new trace, not the header: %.80q", first.Metadata.TraceParent)
	assert.Less(t, len(first.Data), 64<<10)
	assert.Empty(t, s.stream("poison-big"))
}

// Item 7: /healthz said 200 while the store could not take writes. /readyz
// is 503, naming the event store, while the store is down, and 200 again
// once it is back; the failure is counted.
func TestFaultReadyzTellsTheTruth(t *testing.T) {
	dir := t.TempDir()
	srv := startStore(t, "127.0.0.1:0", dir, 0)
	addr := srv.Addr()
	s := startSystem(t, engine.Config{EventStoreURL: fmt.Sprintf("esdb://%s?tls=false", addr)})
	t.Cleanup(func() { _ = srv.Close() })
	require.Eventually(t, func() bool { code, _ := s.readyz(); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)

	require.NoError(t, srv.Close())
	code, failing := s.readyz()
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, failing, "eventstore")
	assert.NotContains(t, failing, "kafka")
	assert.NotEqual(t, "0", s.metric(`saga_readiness_failures_total{check="eventstore"}`))

	srv = startStore(t, addr, dir, 0)
	require.Eventually(t, func() bool { code, _ := s.readyz(); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
	s.publish("ready-1", []byte(`{"orderId":"ready-1"}`))
	s.awaitTerminal([]string{"ready-1"}, 60*time.Second)
}

// Item 8: a reply for a task never submitted left an empty task in the
// scheduler, and after a rebalance it appended TaskFailed, creating a
// phantom task in Error. Here the reply is dead-lettered, a rebalance
// follows, and no stream task-<id> ever exists.
func TestFaultNoPhantomTasks(t *testing.T) {
	s := startSystem(t, engine.Config{})
	client := s.producer()
	reply := func(key string) {
		require.NoError(t, client.ProduceSync(ctx(t, 10*time.Second), &kgo.Record{Topic: protocol.RepliesTopic, Key: []byte("ghost-1"),
			Value:   []byte(`{"taskId":"ghost-1","step":"reserve-inventory","attempt":1,"outcome":"succeeded"}`),
			Headers: []kgo.RecordHeader{{Key: "test", Value: []byte(key)}}}).FirstErr())
	}
	reply("before")
	s.consumeTopic(protocol.DeadLetterTopic, 1, 30*time.Second)
	s.app.Scheduler.Rebalanced(ctx(t, 10*time.Second))
	// The shard of ghost-1 handles jobs in order: once this second reply is
	// dead-lettered, the rebalance before it has been carried out.
	reply("after")
	s.consumeTopic(protocol.DeadLetterTopic, 2, 30*time.Second)
	assert.Empty(t, s.stream("ghost-1"), "no phantom task stream")
	_, ok, _ := s.app.Tasks.Get(context.Background(), "ghost-1")
	assert.False(t, ok)
	assert.Equal(t, int64(2), s.app.Scheduler.Stats().RejectedReplies)
}

// Item 9: replyTo could name any topic, so statuses became forged replies,
// commands and orders. Here orders naming saga's topics, orders or a topic
// outside the pattern are dead-lettered with the reason, nothing reaches
// those topics, and an order with a proper reply topic gets its statuses.
func TestFaultReplyToMustBeAReplyTopic(t *testing.T) {
	s := startSystem(t, engine.Config{})
	bad := map[string]string{"to-replies": protocol.RepliesTopic, "to-orders": protocol.OrdersTopic,
		"to-cmd": protocol.CommandTopic("inventory"), "to-status": protocol.StatusTopic, "to-shop": "shop.replies"}
	for id, topic := range bad {
		s.publish(id, []byte(fmt.Sprintf(`{"orderId":%q,"replyTo":%q}`, id, topic)))
	}
	s.publish("to-reply", []byte(`{"orderId":"to-reply","replyTo":"reply.faults"}`))
	s.awaitStatus("reply.faults", "to-reply", domain.StateProcessed)
	reasons := s.deadLetters(len(bad))
	for id := range bad {
		assert.Contains(t, reasons[id], "replyTo names a topic that is not allowed", id)
		assert.Empty(t, s.stream(id), id)
	}
	assert.Equal(t, int64(0), s.app.Scheduler.Stats().RejectedReplies, "no status was read as a reply")
	assert.Equal(t, processes.SubmitterStats{Accepted: 1, Rejected: int64(len(bad))}, s.app.Submitter.Stats())
}

// Item 5: a tombstoned checkpoint stream stopped status publishing for
// good. Here statuses keep flowing after the tombstone, and after a
// restart.
func TestFaultTombstonedCheckpointIsRecovered(t *testing.T) {
	s := startSystem(t, engine.Config{})
	s.publish("cp-1", []byte(`{"orderId":"cp-1"}`))
	s.awaitStatus(protocol.StatusTopic, "cp-1", domain.StateProcessed)

	conf, err := esdb.ParseConnectionString(s.app.EventStoreURL)
	require.NoError(t, err)
	client, err := esdb.NewClient(conf)
	require.NoError(t, err)
	defer client.Close()
	_, err = client.TombstoneStream(ctx(t, 10*time.Second), "saga-checkpoint-status", esdb.TombstoneStreamOptions{ExpectedRevision: esdb.Any{}})
	require.NoError(t, err)

	s.publish("cp-2", []byte(`{"orderId":"cp-2"}`))
	s.awaitStatus(protocol.StatusTopic, "cp-2", domain.StateProcessed)
	s.restart()
	s.publish("cp-3", []byte(`{"orderId":"cp-3"}`))
	s.awaitStatus(protocol.StatusTopic, "cp-3", domain.StateProcessed)
}
