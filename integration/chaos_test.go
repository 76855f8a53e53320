package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/projections"
)

// chaosEnv makes the test binary run a whole sagad for the chaos test.
const chaosEnv = "SAGA_TEST_CHAOS_CHILD"

// The chaos child's event-store index memtable (entries) and task-view
// batch (events): an index entry is an event, a processed 3-step order
// makes 8 and the checkpoints a few more, so an index table and its
// CHECKPOINT are written every thirty orders or so (the default is 131,072
// entries), and the view commits at least every 16 events (default 512).
const chaosIndexMemtable, chaosViewBatch = 256, 16

// chaosChild is the configuration of the sagad the chaos test kills.
type chaosChild struct {
	DataDir, Kafka, EventStore, HTTP string
	Services                         map[string]string
	BudgetMillis                     int
}

func runChaosChild(spec string) {
	var c chaosChild
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	engine.TuneGC()
	a, err := engine.Start(engine.Config{DataDir: c.DataDir, KafkaListen: c.Kafka, EventStoreListen: c.EventStore, HTTPListen: c.HTTP,
		DemoAgents: true, DemoServiceURLs: c.Services, Instance: "chaos-" + strconv.Itoa(os.Getpid()),
		Workflows: []*domain.Workflow{fastWorkflow(time.Duration(c.BudgetMillis) * time.Millisecond),
			chaosGraphWorkflow(time.Duration(c.BudgetMillis) * time.Millisecond)},
		SupervisorInterval: 100 * time.Millisecond, CheckpointEvery: 200 * time.Millisecond, Logger: testLogger(),
		// Small index memtables and task-view batches make index tables,
		// index checkpoints and view commits frequent, so that kills land
		// inside them too.
		EventStoreIndexMemtable: chaosIndexMemtable, TaskViewBatch: chaosViewBatch})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos child:", err)
		os.Exit(2)
	}
	<-a.Scheduler.Ready()
	fmt.Println("ready")
	select {}
}

func freeAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	return lis.Addr().String()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// observed is an event the observer saw committed.
type observed struct {
	id       string
	position uint64
}

// rig runs a sagad as a child process on a durable data directory, with
// demo services in this process (their effect counts survive the kills),
// and observes every event it commits.
type rig struct {
	t        *testing.T
	spec     chaosChild
	child    *exec.Cmd
	services map[string]*demo.Service
	brokers  []string
	esURL    string
	ctx      context.Context
	stop     context.CancelFunc

	mu    sync.Mutex
	seen  map[string]map[uint64]observed
	tasks map[string]*domain.Task
	// onEvent, when set, is told about each event; it runs under mu.
	onEvent func(id string, t *domain.Task)
}

func newRig(t *testing.T, faults []demo.Fault, latency time.Duration) *rig {
	r := &rig{t: t, services: map[string]*demo.Service{}, seen: map[string]map[uint64]observed{}, tasks: map[string]*domain.Task{}}
	urls := map[string]string{}
	for _, agent := range []string{"inventory", "payment", "shipping"} {
		svc := demo.NewService(agent, testLogger())
		svc.SetFaults(faults...)
		svc.Latency = latency
		require.NoError(t, svc.Start("127.0.0.1:0"))
		t.Cleanup(func() { _ = svc.Close() })
		r.services[agent], urls[agent] = svc, svc.URL()
	}
	r.spec = chaosChild{DataDir: t.TempDir(), Kafka: freeAddr(t), EventStore: freeAddr(t), HTTP: freeAddr(t), Services: urls, BudgetMillis: 1000}
	r.brokers = []string{r.spec.Kafka}
	r.esURL = "esdb://" + r.spec.EventStore + "?tls=false"
	r.ctx, r.stop = context.WithCancel(context.Background())
	t.Cleanup(r.stop)
	r.start()
	t.Cleanup(func() { _ = r.child.Process.Kill(); _ = r.child.Wait() })
	go r.observe()
	return r
}

// start starts sagad and returns once it has caught up.
func (r *rig) start() {
	specJSON, _ := json.Marshal(r.spec)
	r.child = exec.Command(os.Args[0], "-test.run=^$")
	r.child.Env = append(os.Environ(), chaosEnv+"="+string(specJSON))
	r.child.Stderr = os.Stderr
	out, err := r.child.StdoutPipe()
	require.NoError(r.t, err)
	require.NoError(r.t, r.child.Start())
	lines := bufio.NewScanner(out)
	require.True(r.t, lines.Scan(), "sagad did not start")
	require.Equal(r.t, "ready", lines.Text())
}

// kill kills sagad with SIGKILL.
func (r *rig) kill() {
	require.NoError(r.t, r.child.Process.Kill())
	_ = r.child.Wait()
}

// observe records every event committed, across restarts.
func (r *rig) observe() {
	store, err := eventstore.Dial(r.esURL, testLogger())
	if err != nil {
		return
	}
	defer store.Close()
	_ = store.SubscribeAll(r.ctx, domain.FromStart(), domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
		if it.Event == nil {
			return nil
		}
		id, _ := domain.TaskIDFromStream(it.Event.Stream)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.seen[id] == nil {
			r.seen[id] = map[uint64]observed{}
			r.tasks[id] = domain.NewTask(id)
		}
		r.seen[id][it.Event.Revision] = observed{id: it.Event.ID, position: it.Event.Position}
		if ev, err := it.Event.Decode(); err == nil {
			r.tasks[id].Apply(ev)
		}
		if r.onEvent != nil {
			r.onEvent(id, r.tasks[id])
		}
		return nil
	})
}

func final(t *domain.Task) bool {
	return t.State == domain.StateProcessed || t.State == domain.StateCompensated
}

// TestChaos runs a load of orders through a sagad that is killed with
// SIGKILL at random moments and restarted each time, against remote
// services with transient errors, hangs and permanent failures, and with
// duplicated orders, commands and replies. At the end it checks that every
// order reached a final state once, compensations ran in reverse order, no
// effect happened twice per idempotency key, no event once committed was
// lost, and every stream replays to the state the live projection shows.
//
// Every second kill is also a power loss: before the restart, the broker's
// files that are not fsynced (groups.log, pids.log, the segments of every
// topic but the orders and dead letters) lose a tail (see cutPowerLoss).
// Recovery must re-derive the commands and replies lost with them.
//
// CI runs 3 kills and 300 orders; SAGA_CHAOS_KILLS and SAGA_CHAOS_ORDERS
// (e.g. 50 and 10000) make the long run; SAGA_CHAOS_POWERLOSS=0 turns the
// power losses off.
// chaosGraphWorkflow is the demo workflow as a graph (issue 26): stock and
// payment side by side, shipping after both, and a gift-wrap step whose
// condition holds for no chaos order, so that it is always skipped.
func chaosGraphWorkflow(budget time.Duration) *domain.Workflow {
	w := fastWorkflow(budget)
	w.Name = "order-graph"
	w.Steps[1].After = []string{}
	w.Steps[2].After = []string{"reserve-inventory", "charge-payment"}
	gift := w.Steps[2]
	gift.Name, gift.When, gift.After = "gift-wrap", "order.giftWrap == true", []string{"reserve-inventory"}
	w.Steps = append(w.Steps, gift)
	return w
}

// chaosWorkflowOf is the workflow of a chaos task, for checkGraph.
func chaosWorkflowOf(task *domain.Task) *domain.Workflow {
	if task.Workflow == "order-graph" {
		return chaosGraphWorkflow(time.Second)
	}
	return demo.Workflow()
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos")
	}
	kills, orders := envInt("SAGA_CHAOS_KILLS", 3), envInt("SAGA_CHAOS_ORDERS", 300)
	powerLoss := envInt("SAGA_CHAOS_POWERLOSS", 1) != 0
	r := newRig(t, []demo.Fault{{Mode: demo.FaultTransient, Rate: 0.1}, {Mode: demo.FaultHang, Rate: 0.03}, {Mode: demo.FaultPermanent, Rate: 0.02}}, 0)
	ids := orderIDs("chaos", orders)
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	finished := map[string]bool{}
	allDone := make(chan struct{})
	r.mu.Lock()
	r.onEvent = func(id string, task *domain.Task) {
		if want[id] && !finished[id] && final(task) {
			finished[id] = true
			if len(finished) == len(want) {
				close(allDone)
			}
		}
	}
	r.mu.Unlock()

	// The duplicator delivers a tenth of the commands and replies twice.
	dup, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.ConsumerGroup("chaos-duplicator"),
		kgo.ConsumeTopics(protocol.CommandTopic("inventory"), protocol.CommandTopic("payment"), protocol.CommandTopic("shipping"), protocol.RepliesTopic))
	require.NoError(t, err)
	defer dup.Close()
	var duplicated atomic.Int64
	go func() {
		for r.ctx.Err() == nil {
			dup.PollFetches(r.ctx).EachRecord(func(rec *kgo.Record) {
				if rand.Float64() < 0.1 {
					dup.Produce(r.ctx, &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Headers: rec.Headers}, func(*kgo.Record, error) {})
					duplicated.Add(1)
				}
			})
		}
	}()

	// The load: orders spread over the kills, one in twenty sent twice.
	producer, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	defer producer.Close()
	published := make(chan struct{})
	go func() {
		defer close(published)
		pause := time.Duration(float64(kills+1) * float64(time.Second) / float64(orders))
		for i, id := range ids {
			order := map[string]any{"orderId": id, "items": []int{i}}
			if i%2 == 1 {
				order["workflow"] = "order-graph" // every other order runs the graph
			}
			body, _ := json.Marshal(order)
			recs := []*kgo.Record{{Topic: protocol.OrdersTopic, Key: []byte(id), Value: body}}
			if i%20 == 0 {
				recs = append(recs, &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte(id), Value: body})
			}
			for r.ctx.Err() == nil && producer.ProduceSync(r.ctx, recs...).FirstErr() != nil {
				time.Sleep(50 * time.Millisecond) // the broker is restarting: try again
			}
			time.Sleep(pause)
		}
	}()

	// The killer: chaos has no event to wait for, so its moments are random.
	// Every second kill is a power loss: the broker's unsynced files lose
	// their tails before sagad starts again.
	atStart, err := unsyncedBrokerFiles(r.spec.DataDir)
	require.NoError(t, err)
	powerLosses := 0
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
		r.kill()
		t.Logf("kill %d: %s", k+1, lastWrites(r.spec.DataDir))
		if powerLoss && k%2 == 1 {
			cut, err := cutPowerLoss(r.spec.DataDir, atStart)
			require.NoError(t, err)
			powerLosses++
			t.Logf("power loss at kill %d: cut %s", k+1, cut)
		}
		r.start()
		atStart, err = unsyncedBrokerFiles(r.spec.DataDir)
		require.NoError(t, err)
	}
	<-published
	select {
	case <-allDone:
	case <-time.After(time.Duration(60+orders/20) * time.Second):
		r.mu.Lock()
		var open []string
		for id := range want {
			if !finished[id] {
				state := domain.TaskState("not submitted")
				if task := r.tasks[id]; task != nil {
					state = task.State
				}
				open = append(open, fmt.Sprintf("%s(%s)", id, state))
			}
		}
		r.mu.Unlock()
		t.Fatalf("%d of %d orders did not finish, e.g. %v", len(open), orders, open[:min(len(open), 5)])
	}
	r.stop()

	// Checks, on the final state of the store.
	reader, err := eventstore.Dial(r.esURL, testLogger())
	require.NoError(t, err)
	defer reader.Close()
	states := map[domain.TaskState]int{}
	graphs := 0
	for _, id := range ids {
		events, err := reader.ReadStream(ctx(t, 10*time.Second), domain.TaskStream(id))
		require.NoError(t, err)
		task := checkStream(t, id, events)
		checkGraph(t, id, chaosWorkflowOf(task), events)
		if task.Workflow == "order-graph" {
			graphs++
			// Skipped, or never reached when stock failed first: never run.
			assert.Contains(t, []domain.StepState{domain.StepStateSkipped, domain.StepStatePending}, task.Step("gift-wrap").State, id)
			if task.State == domain.StateProcessed {
				assert.Equal(t, domain.StepStateSkipped, task.Step("gift-wrap").State, id)
			}
		}
		states[task.State]++
		r.mu.Lock()
		for rev, o := range r.seen[id] {
			if assert.Less(t, rev, uint64(len(events)), "%s lost revision %d", id, rev) {
				assert.Equal(t, o.id, events[rev].ID, "%s revision %d changed", id, rev)
				assert.Equal(t, o.position, events[rev].Position, "%s revision %d moved", id, rev)
			}
		}
		r.mu.Unlock()
		submitted := 0
		for _, e := range events {
			if e.Type == domain.TaskSubmittedType {
				submitted++
			}
		}
		assert.Equal(t, 1, submitted, "%s: one task per order, duplicates included", id)
	}
	for name, svc := range r.services {
		for key, n := range svc.Effects() {
			assert.Equal(t, 1, n, "%s: %s took effect %d times", name, key, n)
		}
	}
	// Replay equals the live projection of the last sagad.
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + r.spec.HTTP + "/api/tasks?limit=1")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var list struct{ Counts map[string]int }
		_ = json.NewDecoder(resp.Body).Decode(&list)
		return list.Counts["Processed"]+list.Counts["Compensated"] >= orders
	}, 60*time.Second, 100*time.Millisecond, "the projection caught up")
	for _, id := range ids {
		resp, err := http.Get("http://" + r.spec.HTTP + "/api/tasks/" + id)
		require.NoError(t, err)
		var live protocol.TaskView
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&live))
		resp.Body.Close()
		events, err := reader.ReadStream(ctx(t, 10*time.Second), domain.TaskStream(id))
		require.NoError(t, err)
		replayed, err := projections.BuildAudit(id, events, projections.Cut{})
		require.NoError(t, err)
		assert.Empty(t, projections.Drift(replayed.State, &live), "%s: replay differs from the live projection", id)
	}
	assert.Equal(t, orders/2, graphs, "every other order ran the graph")
	t.Logf("chaos: %d kills (%d with power loss), %d orders (%d of them graphs): %v; %d commands and replies duplicated", kills, powerLosses, orders, graphs,
		states, duplicated.Load())
	assert.Zero(t, states[domain.StateError], "nothing should end in Error with these faults")
}

// lastWrites says how long before now the event store's index checkpoint
// and the task view's SQLite WAL were last written, and how many index
// tables there are: with the chaos child's small memtable and view batch,
// kills land within milliseconds of both.
func lastWrites(dataDir string) string {
	age := func(path string) string {
		info, err := os.Stat(path)
		if err != nil {
			return "none"
		}
		return time.Since(info.ModTime()).Round(time.Millisecond).String() + " ago"
	}
	tables, _ := filepath.Glob(filepath.Join(dataDir, "eventstore", "index", "table-*"))
	views, _ := filepath.Glob(filepath.Join(dataDir, "taskview", "tasks-*.db-wal"))
	view := "none"
	if len(views) > 0 {
		view = age(views[0])
	}
	return fmt.Sprintf("index CHECKPOINT written %s (%d tables), task view WAL %s",
		age(filepath.Join(dataDir, "eventstore", "index", "CHECKPOINT")), len(tables), view)
}

// TestRecoveryTimeAfterKill measures, when SAGA_MEASURE_RECOVERY is set, how
// long a sagad killed with SIGKILL under load takes from the moment it is
// started again until every task that was in flight has moved again (a new
// event in its stream). It reports; it asserts no time.
func TestRecoveryTimeAfterKill(t *testing.T) {
	if os.Getenv("SAGA_MEASURE_RECOVERY") == "" {
		t.Skip("a measurement: set SAGA_MEASURE_RECOVERY=1")
	}
	orders := envInt("SAGA_RECOVERY_ORDERS", 2000)
	r := newRig(t, nil, 20*time.Millisecond)
	producer, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	defer producer.Close()
	half := make(chan struct{})
	var done atomic.Int64
	var once sync.Once
	r.mu.Lock()
	r.onEvent = func(id string, task *domain.Task) {
		if task.State == domain.StateProcessed && done.Add(1) >= int64(orders/4) {
			once.Do(func() { close(half) })
		}
	}
	r.mu.Unlock()
	var recs []*kgo.Record
	for _, id := range orderIDs("recover", orders) {
		recs = append(recs, &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte(id), Value: []byte(`{"orderId":"` + id + `"}`)})
	}
	require.NoError(t, producer.ProduceSync(r.ctx, recs...).FirstErr())
	<-half
	r.kill()

	r.mu.Lock()
	inFlight := map[string]int64{}
	for id, task := range r.tasks {
		if !final(task) {
			inFlight[id] = task.Revision
		}
	}
	moved := make(chan struct{})
	remaining := len(inFlight)
	inFlightAtKill := remaining
	require.Positive(t, inFlightAtKill, "tasks were in flight when sagad was killed")
	r.onEvent = func(id string, task *domain.Task) {
		if rev, ok := inFlight[id]; ok && task.Revision > rev {
			delete(inFlight, id)
			if remaining--; remaining == 0 {
				close(moved)
			}
		}
	}
	r.mu.Unlock()
	t0 := time.Now()
	r.start()
	ready := time.Since(t0)
	select {
	case <-moved:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%d in-flight tasks did not move again", remaining)
	}
	t.Logf("recovery after kill -9 with %d tasks in flight: sagad caught up in %v, every in-flight task moved again %v after the restart",
		inFlightAtKill, ready.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
}
