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
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/cmd/sagad/app"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections"
)

// chaosEnv makes the test binary run a whole sagad for the chaos test.
const chaosEnv = "SAGA_TEST_CHAOS_CHILD"

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
	a, err := app.Start(app.Config{DataDir: c.DataDir, KafkaListen: c.Kafka, EventStoreListen: c.EventStore, HTTPListen: c.HTTP,
		DemoAgents: true, DemoServiceURLs: c.Services, Instance: "chaos-" + strconv.Itoa(os.Getpid()),
		Workflows: []*domain.Workflow{fastWorkflow(time.Duration(c.BudgetMillis) * time.Millisecond)},
		SupervisorInterval: 100 * time.Millisecond, Logger: testLogger()})
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

// TestChaos runs a load of orders through a sagad that is killed with
// SIGKILL at random moments and restarted each time, against remote
// services with transient errors, hangs and permanent failures, and with
// duplicated orders, commands and replies. At the end it checks that every
// order reached a final state once, compensations ran in reverse order, no
// effect happened twice per idempotency key, no event once committed was
// lost, and every stream replays to the state the live projection shows.
//
// CI runs 3 kills and 300 orders; SAGA_CHAOS_KILLS and SAGA_CHAOS_ORDERS
// (e.g. 50 and 10000) make the long run.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos")
	}
	kills, orders := envInt("SAGA_CHAOS_KILLS", 3), envInt("SAGA_CHAOS_ORDERS", 300)
	faulty := []demo.Fault{{Mode: demo.FaultTransient, Rate: 0.1}, {Mode: demo.FaultHang, Rate: 0.03}, {Mode: demo.FaultPermanent, Rate: 0.02}}
	services := map[string]*demo.Service{}
	urls := map[string]string{}
	for _, agent := range []string{"inventory", "payment", "shipping"} {
		svc := demo.NewService(agent, testLogger())
		svc.SetFaults(faulty...)
		require.NoError(t, svc.Start("127.0.0.1:0"))
		t.Cleanup(func() { _ = svc.Close() })
		services[agent], urls[agent] = svc, svc.URL()
	}
	spec := chaosChild{DataDir: t.TempDir(), Kafka: freeAddr(t), EventStore: freeAddr(t), HTTP: freeAddr(t), Services: urls, BudgetMillis: 1000}
	specJSON, _ := json.Marshal(spec)
	var child *exec.Cmd
	start := func() {
		child = exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), chaosEnv+"="+string(specJSON))
		child.Stderr = os.Stderr
		out, err := child.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, child.Start())
		lines := bufio.NewScanner(out)
		require.True(t, lines.Scan(), "sagad did not start")
		require.Equal(t, "ready", lines.Text())
	}
	start()
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	brokers := []string{spec.Kafka}
	esURL := "esdb://" + spec.EventStore + "?tls=false"
	runCtx, stopAll := context.WithCancel(context.Background())
	defer stopAll()

	// The observer records every event committed, across the restarts.
	store, err := eventstore.Dial(esURL, testLogger())
	require.NoError(t, err)
	defer store.Close()
	var mu sync.Mutex
	seen := map[string]map[uint64]observed{}
	finished := map[string]bool{}
	ids := orderIDs("chaos", orders)
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	allDone := make(chan struct{})
	tasks := map[string]*domain.Task{}
	go func() {
		_ = store.SubscribeAll(runCtx, domain.FromStart(), domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
			if it.Event == nil {
				return nil
			}
			id, _ := domain.TaskIDFromStream(it.Event.Stream)
			mu.Lock()
			defer mu.Unlock()
			if seen[id] == nil {
				seen[id] = map[uint64]observed{}
				tasks[id] = domain.NewTask(id)
			}
			seen[id][it.Event.Revision] = observed{id: it.Event.ID, position: it.Event.Position}
			if ev, err := it.Event.Decode(); err == nil {
				tasks[id].Apply(ev)
			}
			if want[id] && !finished[id] && (tasks[id].State == domain.StateProcessed || tasks[id].State == domain.StateCompensated) {
				finished[id] = true
				if len(finished) == len(want) {
					close(allDone)
				}
			}
			return nil
		})
	}()

	// The duplicator delivers a tenth of the commands and replies twice.
	dup, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("chaos-duplicator"),
		kgo.ConsumeTopics(domain.CommandTopic("inventory"), domain.CommandTopic("payment"), domain.CommandTopic("shipping"), domain.RepliesTopic))
	require.NoError(t, err)
	defer dup.Close()
	var duplicated atomic.Int64
	go func() {
		for runCtx.Err() == nil {
			dup.PollFetches(runCtx).EachRecord(func(r *kgo.Record) {
				if rand.Float64() < 0.1 {
					copyRec := &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers}
					dup.Produce(runCtx, copyRec, func(*kgo.Record, error) {})
					duplicated.Add(1)
				}
			})
		}
	}()

	// The load: orders spread over the kills, one in twenty sent twice.
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	defer producer.Close()
	published := make(chan struct{})
	go func() {
		defer close(published)
		pause := time.Duration(float64(kills+1) * float64(time.Second) / float64(orders))
		for i, id := range ids {
			body, _ := json.Marshal(map[string]any{"orderId": id, "items": []int{i}})
			recs := []*kgo.Record{{Topic: domain.OrdersTopic, Key: []byte(id), Value: body}}
			if i%20 == 0 {
				recs = append(recs, &kgo.Record{Topic: domain.OrdersTopic, Key: []byte(id), Value: body})
			}
			for runCtx.Err() == nil && producer.ProduceSync(runCtx, recs...).FirstErr() != nil {
				time.Sleep(50 * time.Millisecond) // the broker is restarting: try again
			}
			time.Sleep(pause)
		}
	}()

	// The killer.
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
		require.NoError(t, child.Process.Kill())
		_ = child.Wait()
		start()
	}
	<-published
	select {
	case <-allDone:
	case <-time.After(time.Duration(60+orders/20) * time.Second):
		mu.Lock()
		var open []string
		for id := range want {
			if !finished[id] {
				open = append(open, fmt.Sprintf("%s(%s)", id, tasks[id].State))
			}
		}
		mu.Unlock()
		t.Fatalf("%d of %d orders did not finish, e.g. %v", len(open), orders, open[:min(len(open), 5)])
	}
	stopAll()

	// Checks, on the final state of the store.
	reader, err := eventstore.Dial(esURL, testLogger())
	require.NoError(t, err)
	defer reader.Close()
	states := map[domain.TaskState]int{}
	for _, id := range ids {
		events, err := reader.ReadStream(ctx(t, 10*time.Second), domain.TaskStream(id))
		require.NoError(t, err)
		task := checkStream(t, id, events)
		states[task.State]++
		mu.Lock()
		for rev, o := range seen[id] {
			if assert.Less(t, rev, uint64(len(events)), "%s lost revision %d", id, rev) {
				assert.Equal(t, o.id, events[rev].ID, "%s revision %d changed", id, rev)
				assert.Equal(t, o.position, events[rev].Position, "%s revision %d moved", id, rev)
			}
		}
		mu.Unlock()
		assert.Equal(t, domain.TaskSubmittedType, events[0].Type)
		submitted := 0
		for _, e := range events {
			if e.Type == domain.TaskSubmittedType {
				submitted++
			}
		}
		assert.Equal(t, 1, submitted, "%s: one task per order, duplicates included", id)
	}
	for name, svc := range services {
		for key, n := range svc.Effects() {
			assert.Equal(t, 1, n, "%s: %s took effect %d times", name, key, n)
		}
	}
	// Replay equals the live projection of the last sagad.
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + spec.HTTP + "/api/tasks?limit=100000")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var list struct{ Counts map[string]int }
		_ = json.NewDecoder(resp.Body).Decode(&list)
		return list.Counts["Processed"]+list.Counts["Compensated"] >= orders
	}, 60*time.Second, 100*time.Millisecond, "the projection caught up")
	for _, id := range ids {
		resp, err := http.Get("http://" + spec.HTTP + "/api/tasks/" + id)
		require.NoError(t, err)
		var live domain.Task
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&live))
		resp.Body.Close()
		events, err := reader.ReadStream(ctx(t, 10*time.Second), domain.TaskStream(id))
		require.NoError(t, err)
		replayed, err := projections.BuildAudit(id, events, projections.Cut{})
		require.NoError(t, err)
		assert.Empty(t, projections.Drift(replayed.State, &live), "%s: replay differs from the live projection", id)
	}
	t.Logf("chaos: %d kills, %d orders: %v; %d commands and replies duplicated", kills, orders, states, duplicated.Load())
	assert.Zero(t, states[domain.StateError], "nothing should end in Error with these faults")
}
