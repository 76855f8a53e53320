package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// system is a whole saga system under test.
type system struct {
	t   *testing.T
	cfg engine.Config
	app *engine.App
}

func testLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("SAGA_TEST_VERBOSE") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// fastBackoff keeps retries quick in tests.
var fastBackoff = domain.Backoff{Initial: 20 * time.Millisecond, Multiplier: 2, Max: 100 * time.Millisecond, Jitter: 0.2}

// fastWorkflow is the order workflow with budgets short enough for tests of
// failures.
func fastWorkflow(budget time.Duration) *domain.Workflow {
	return demo.Workflow().WithBudget(budget, fastBackoff)
}

func startSystem(t *testing.T, cfg engine.Config) *system {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	for _, listen := range []*string{&cfg.KafkaListen, &cfg.EventStoreListen, &cfg.HTTPListen} {
		if *listen == "" {
			*listen = "127.0.0.1:0"
		}
	}
	cfg.DemoAgents = true
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	if cfg.SupervisorInterval == 0 {
		cfg.SupervisorInterval = 50 * time.Millisecond
	}
	if cfg.CheckpointEvery == 0 {
		// Often, so that restarts in tests resume from checkpoints.
		cfg.CheckpointEvery = 200 * time.Millisecond
	}
	s := &system{t: t, cfg: cfg}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *system) start() {
	a, err := engine.Start(s.cfg)
	require.NoError(s.t, err)
	s.app = a
	waits := map[string]<-chan struct{}{}
	if a.Scheduler != nil {
		waits["scheduler"] = a.Scheduler.Ready()
	}
	if a.Supervisor != nil {
		waits["supervisor"] = a.Supervisor.Ready()
	}
	for name, ready := range waits {
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			s.t.Fatalf("%s did not catch up", name)
		}
	}
}

func (s *system) stop() {
	if s.app != nil {
		s.app.Close()
		s.app = nil
	}
}

// restart stops the system and starts it again on the same data directory.
func (s *system) restart() {
	t0 := time.Now()
	s.stop()
	t1 := time.Now()
	s.start()
	s.t.Logf("restart: stop %v, start %v", t1.Sub(t0), time.Since(t1))
}

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// producer is a plain franz-go client, as any application would use.
func (s *system) producer() *kgo.Client {
	client, err := kgo.NewClient(kgo.SeedBrokers(s.app.KafkaBrokers...), kgo.AllowAutoTopicCreation(),
		kgo.ProducerBatchMaxBytes(broker.MaxRecordBytes))
	require.NoError(s.t, err)
	s.t.Cleanup(client.Close)
	return client
}

func (s *system) publish(key string, body []byte) {
	s.t.Helper()
	client := s.producer()
	require.NoError(s.t, client.ProduceSync(ctx(s.t, 10*time.Second), &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte(key), Value: body}).FirstErr())
}

func orderIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return ids
}

func (s *system) publishOrders(ids []string) {
	s.t.Helper()
	client := s.producer()
	recs := make([]*kgo.Record, len(ids))
	for i, id := range ids {
		body, _ := json.Marshal(map[string]any{"orderId": id, "items": []map[string]any{{"sku": "book", "qty": 1 + i%3}}})
		recs[i] = &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte(id), Value: body}
	}
	require.NoError(s.t, client.ProduceSync(ctx(s.t, 30*time.Second), recs...).FirstErr())
}

// awaitTerminal follows the event store until every named task is terminal
// and returns their folded states.
func (s *system) awaitTerminal(ids []string, timeout time.Duration) map[string]*domain.Task {
	s.t.Helper()
	return s.awaitTasks(ids, timeout, func(t *domain.Task) bool { return t.State.Terminal() })
}

// awaitTasks follows the event store until every named task satisfies done
// and returns their folded states.
func (s *system) awaitTasks(ids []string, timeout time.Duration, done func(*domain.Task) bool) map[string]*domain.Task {
	s.t.Helper()
	store, err := eventstore.Dial(s.app.EventStoreURL, testLogger())
	require.NoError(s.t, err)
	defer store.Close()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	tasks := map[string]*domain.Task{}
	remaining := len(want)
	errDone := fmt.Errorf("done")
	var mu sync.Mutex
	err = store.SubscribeAll(ctx(s.t, timeout), domain.FromStart(), domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
		if it.Event == nil {
			return nil
		}
		id, _ := domain.TaskIDFromStream(it.Event.Stream)
		if !want[id] {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		t := tasks[id]
		if t == nil {
			t = domain.NewTask(id)
			tasks[id] = t
		}
		wasDone := t.Exists() && done(t)
		ev, err := domain.DecodeEvent(it.Event.Type, it.Event.Data)
		require.NoError(s.t, err)
		t.Apply(ev)
		if !wasDone && done(t) {
			if remaining--; remaining == 0 {
				return errDone
			}
		}
		return nil
	})
	if err != errDone {
		var open []string
		for id := range want {
			if t := tasks[id]; t == nil || !done(t) {
				open = append(open, id)
			}
		}
		s.t.Fatalf("%d of %d tasks did not get there (%v), e.g. %v", len(open), len(want), err, open[:min(5, len(open))])
	}
	return tasks
}

func (s *system) stream(id string) []domain.RecordedEvent {
	s.t.Helper()
	events, err := s.app.Store.ReadStream(ctx(s.t, 10*time.Second), domain.TaskStream(id))
	require.NoError(s.t, err)
	return events
}

func types(events []domain.RecordedEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

// consumeTopic reads n records of a topic from its start.
func (s *system) consumeTopic(topic string, n int, timeout time.Duration) []*kgo.Record {
	s.t.Helper()
	client, err := kgo.NewClient(kgo.SeedBrokers(s.app.KafkaBrokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(s.t, err)
	defer client.Close()
	c := ctx(s.t, timeout)
	var out []*kgo.Record
	for len(out) < n {
		fetches := client.PollFetches(c)
		require.NoError(s.t, c.Err(), "only %d of %d records arrived on %s", len(out), n, topic)
		out = append(out, fetches.Records()...)
	}
	return out
}

// awaitView waits until the HTTP API's projection shows the task in state:
// it follows the store a moment behind the event store itself.
func (s *system) awaitView(id string, state domain.TaskState) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		task, ok, _ := s.app.Tasks.Get(context.Background(), id)
		return ok && task.State == state
	}, 10*time.Second, 5*time.Millisecond, "the projection shows %s %s", id, state)
}
