package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/integration/invariants"
	"github.com/sagaengine/saga/projections"
)

// leaderGivesUpWithoutStore says whether a supervisor leader cut off from
// the event store gives up its lease (issue 28's first lease defect): with
// it true, attempts due during the cut that time out later than
// lateTimeoutBound fail the test; false would only log the lateness. The
// leader stands down (processes.Supervisor.StoreTimeout), and the standby
// takes the lease even when the broker dropped it from a rebalance earlier
// in the run (a kill -9 then a SIGSTOPped broker, seed 1795655256000944581):
// it joins again as a new member once its group requests go unanswered
// (kafka.LeaseRejoinAfter).
const leaderGivesUpWithoutStore = true

// lateTimeoutBound is how late after its complete-by an attempt may time
// out when a supervisor leader is cut off: the lease's session timeout, the
// supervisor's interval and the standby's catching up.
const lateTimeoutBound = kafka.LeaseSessionTimeout + 4*time.Second

func quietLogger() *slog.Logger {
	if os.Getenv("SAGA_TEST_VERBOSE") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "%s", name)
	return d
}

// observer follows every task event the event store commits, across
// restarts of the store, and folds each task's state.
type observer struct {
	mu    sync.Mutex
	tasks map[string]*domain.Task
}

func observe(ctx context.Context, url string) *observer {
	o := &observer{tasks: map[string]*domain.Task{}}
	go func() {
		from := domain.FromStart()
		for ctx.Err() == nil {
			store, err := eventstore.Dial(url, quietLogger())
			if err == nil {
				_ = store.SubscribeAll(ctx, from, domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
					if it.Event == nil {
						return nil
					}
					from = domain.AfterPosition(it.Event.Position)
					id, _ := domain.TaskIDFromStream(it.Event.Stream)
					o.mu.Lock()
					defer o.mu.Unlock()
					if o.tasks[id] == nil {
						o.tasks[id] = domain.NewTask(id)
					}
					if ev, err := it.Event.Decode(); err == nil {
						o.tasks[id].Apply(ev)
					}
					return nil
				})
				store.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return o
}

func resting(s domain.TaskState) bool {
	return s == domain.StateProcessed || s == domain.StateCompensated || s == domain.StateError
}

// unfinished lists the ids whose task is not at rest, with their states.
func (o *observer) unfinished(ids []string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var open []string
	for _, id := range ids {
		state := domain.TaskState("not submitted")
		if task := o.tasks[id]; task != nil {
			state = task.State
		}
		if !resting(state) {
			open = append(open, id+"("+string(state)+")")
		}
	}
	return open
}

// workload publishes orders through Kafka, as users do, at a steady rate;
// one in twenty is sent twice. An order is acknowledged when the broker
// acknowledged it.
type workload struct {
	mu    sync.Mutex
	acked []string
	sent  int
}

func (w *workload) run(ctx context.Context, t *testing.T, brokers string, perSecond int) {
	client, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.RequestTimeoutOverhead(2*time.Second), kgo.RecordDeliveryTimeout(5*time.Second))
	require.NoError(t, err)
	defer client.Close()
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		id := fmt.Sprintf("cluster-%05d", i)
		body, _ := json.Marshal(map[string]any{"orderId": id, "items": []int{i}})
		recs := []*kgo.Record{{Topic: protocol.OrdersTopic, Key: []byte(id), Value: body}}
		if i%20 == 0 {
			recs = append(recs, &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte(id), Value: body})
		}
		w.mu.Lock()
		w.sent++
		w.mu.Unlock()
		// Sent once: an order the broker did not acknowledge may or may not
		// have become a task, and is not counted.
		if client.ProduceSync(ctx, recs...).FirstErr() == nil {
			w.mu.Lock()
			w.acked = append(w.acked, id)
			w.mu.Unlock()
		}
	}
}

func (w *workload) ids() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.acked...)
}

// TestCluster runs the split topology (cluster_test.go's topology) under
// a steady load of orders and a nemesis, then checks the invariants on the
// event store and the API. The short version (CI) injects each fault once,
// briefly: kill -9 and SIGSTOP of a random node, a random node cut off
// from the event store and one from the broker, and the supervisor leader
// cut off from each. With SAGA_CLUSTER_LONG (a duration, e.g. 10m) it
// injects random faults of every kind, one or two at a time, for that long.
// README.md has the details.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("the cluster suite starts nine processes")
	}
	root, why := runningAsRoot()
	if !root {
		if os.Getenv("SAGA_REQUIRE_TOOLS") != "" && os.Getuid() == 0 {
			t.Fatalf("%s, and SAGA_REQUIRE_TOOLS is set (.ci/run installs iptables)", why)
		}
		t.Log(why)
	}
	long := envDuration(t, "SAGA_CLUSTER_LONG", 0)
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("SAGA_CLUSTER_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (SAGA_CLUSTER_SEED replays the nemesis's choices)", seed)
	rate := 8
	if v, err := strconv.Atoi(os.Getenv("SAGA_CLUSTER_RATE")); err == nil && v > 0 {
		rate = v
	}

	// The services the agents call: some calls fail for good, so that
	// tasks compensate (after the first step or the first two), some fail
	// for a moment, and a few hang until their attempt times out.
	services := map[string]*demo.Service{}
	hang := []demo.Fault{{Mode: demo.FaultTransient, Rate: 0.1}, {Mode: demo.FaultPermanent, Rate: 0.05}, {Mode: demo.FaultHang, Rate: 0.02}}
	for _, agent := range demo.Workflow().Agents() {
		svc := demo.NewService(agent, quietLogger())
		faults := []demo.Fault{{Mode: demo.FaultTransient, Rate: 0.1}}
		switch agent {
		case "payment":
			faults = append(faults, demo.Fault{Mode: demo.FaultPermanent, Rate: 0.1})
		case "shipping":
			faults = hang
		}
		svc.SetFaults(faults...)
		require.NoError(t, svc.Start("127.0.0.1:0"))
		t.Cleanup(func() { _ = svc.Close() })
		services[agent] = svc
	}
	// manyHangs makes a fifth of the shipping calls hang, so that the
	// supervisor has timeouts to act on while its leader is cut off.
	manyHangs := func(on bool) {
		if on {
			services["shipping"].SetFaults(demo.Fault{Mode: demo.FaultTransient, Rate: 0.1}, demo.Fault{Mode: demo.FaultHang, Rate: 0.2})
		} else {
			services["shipping"].SetFaults(hang...)
		}
	}

	started := time.Now()
	c := startCluster(t, services, root)
	t.Logf("cluster of %d processes up in %v", len(c.order), time.Since(started).Round(time.Millisecond))
	n := &nemesis{c: c, rnd: rand.New(rand.NewPCG(seed, seed^0x5a6a)), busy: map[string]bool{}}
	if root {
		n.fw = newFirewall(t)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	esURL := "esdb://" + c.storeAt + "?tls=false"
	obs := observe(ctx, esURL)
	load := &workload{}
	loadCtx, stopLoad := context.WithCancel(ctx)
	loaded := make(chan struct{})
	go func() { defer close(loaded); load.run(loadCtx, t, c.kafkaAt, rate) }()

	settle := func() { time.Sleep(3 * time.Second) }
	settle()
	if long > 0 {
		deadline := time.Now().Add(long)
		for round := 1; time.Now().Before(deadline); round++ {
			d := time.Duration(2+n.rnd.IntN(14)) * time.Second
			manyHangs(n.rnd.IntN(3) == 0)
			// One or two faults at once, on different nodes.
			var faults sync.WaitGroup
			for k := 0; k < 1+n.rnd.IntN(2); k++ {
				kind, target := n.choose()
				if target == nil {
					continue
				}
				faults.Add(1)
				go func() { defer faults.Done(); n.inject(kind, target, d) }()
			}
			faults.Wait()
			manyHangs(false)
			time.Sleep(time.Duration(1+n.rnd.IntN(4)) * time.Second)
		}
	} else {
		t.Run("kill", func(t *testing.T) {
			n.kill(n.pick(), time.Second)
			settle()
		})
		t.Run("pause", func(t *testing.T) {
			n.pause(n.pick(), 4*time.Second)
			settle()
		})
		t.Run("partition-store", func(t *testing.T) {
			if n.fw == nil {
				t.Skip(why)
			}
			n.partition("partition from the store", n.pick(storeNode), storeNode, 6*time.Second)
			settle()
		})
		t.Run("partition-broker", func(t *testing.T) {
			if n.fw == nil {
				t.Skip(why)
			}
			n.partition("partition from the broker", n.pick(storeNode, "broker"), "broker", 6*time.Second)
			settle()
		})
		t.Run("leader-store", func(t *testing.T) {
			if n.fw == nil {
				t.Skip(why)
			}
			manyHangs(true)
			defer manyHangs(false)
			settle() // attempts that hang are in flight when the cut starts
			// Longer than lateTimeoutBound, so that a leader that keeps its
			// lease shows as timeouts later than the bound.
			n.partition("leader cut off from the store", c.awaitLeader(), storeNode, lateTimeoutBound+5*time.Second)
			settle()
		})
		t.Run("leader-broker", func(t *testing.T) {
			if n.fw == nil {
				t.Skip(why)
			}
			manyHangs(true)
			defer manyHangs(false)
			settle()
			n.partition("leader cut off from the broker", c.awaitLeader(), "broker", 10*time.Second)
			settle()
		})
	}
	stopLoad()
	<-loaded
	load.mu.Lock()
	t.Logf("orders: %d sent, %d acknowledged", load.sent, len(load.acked))
	load.mu.Unlock()
	ids := load.ids()
	require.NotEmpty(t, ids)

	// Every task at rest once the nemesis stopped.
	drain := time.Now()
	for name, p := range c.procs {
		assert.False(t, p.exited(), "%s exited by itself; see %s:\n%s", name, p.logPath, tail(p.logPath, 20))
	}
	for open := obs.unfinished(ids); len(open) > 0; open = obs.unfinished(ids) {
		if time.Since(drain) > 2*time.Minute {
			t.Fatalf("%d tasks not at rest two minutes after the load stopped, e.g. %v", len(open), open[:min(len(open), 10)])
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("every task at rest %v after the load stopped", time.Since(drain).Round(time.Millisecond))
	check(t, c, n, ids)
	t.Logf("whole run: %v", time.Since(started).Round(time.Millisecond))
}

// check checks the invariants on the event store and the API.
func check(t *testing.T, c *cluster, n *nemesis, ids []string) {
	reader, err := eventstore.Dial("esdb://"+c.storeAt+"?tls=false", quietLogger())
	require.NoError(t, err)
	defer reader.Close()
	read := func(id string) []domain.RecordedEvent {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		events, err := reader.ReadStream(rctx, domain.TaskStream(id))
		require.NoError(t, err, "read %s", id)
		return events
	}
	states := map[domain.TaskState]int{}
	var actions []invariants.Action
	var all []domain.RecordedEvent
	violations := 0
	for _, id := range ids {
		events := read(id)
		submitted := 0
		for _, e := range events {
			if e.Type == domain.TaskSubmittedType {
				submitted++
			}
		}
		all = append(all, events...)
		// Every acknowledged order became exactly one task.
		if !assert.Equal(t, 1, submitted, "%s: one task per acknowledged order", id) {
			violations++
		}
		task, problems := invariants.Stream(id, events)
		problems = append(problems, invariants.Effects(id, events)...)
		for _, p := range problems {
			assert.Fail(t, "invariant violated", p)
		}
		violations += len(problems)
		states[task.State]++
		actions = append(actions, invariants.SupervisorActions(events)...)
	}
	// No effect twice per idempotency key.
	for name, svc := range c.services {
		for key, times := range svc.Effects() {
			assert.Equal(t, 1, times, "%s: %s took effect %d times", name, key, times)
		}
	}
	// No two supervisors acting as leaders at once.
	for _, p := range invariants.OverlappingLeaders(actions, kafka.LeaseSessionTimeout) {
		assert.Fail(t, "two supervisors acted as leader", p)
		violations++
	}
	byActor := map[string]int{}
	for _, a := range actions {
		byActor[a.Actor]++
	}
	t.Logf("%d tasks: %v; %d invariant violations; supervisor actions by actor: %v", len(ids), states, violations, byActor)
	assert.Zero(t, states[domain.StateError], "nothing should end in Error with these faults")

	for _, ph := range n.phases {
		report(t, ph, all)
	}

	// The API shows what the event store holds.
	api := "http://" + c.apiAt
	require.Eventually(t, func() bool {
		resp, err := http.Get(api + "/api/tasks?limit=1")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var list struct{ Counts map[string]int }
		_ = json.NewDecoder(resp.Body).Decode(&list)
		return list.Counts["Processed"]+list.Counts["Compensated"]+list.Counts["Error"] >= len(ids)
	}, 60*time.Second, 100*time.Millisecond, "the API's view caught up")
	sort.Strings(ids)
	for _, id := range ids {
		resp, err := http.Get(api + "/api/tasks/" + id)
		require.NoError(t, err)
		var live protocol.TaskView
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&live))
		resp.Body.Close()
		replayed, err := projections.BuildAudit(id, read(id), projections.Cut{})
		require.NoError(t, err)
		assert.Empty(t, projections.Drift(replayed.State, &live), "%s: the API differs from the event store", id)
	}
}

// report tells what happened during a phase of the nemesis: how many
// attempts were dispatched, how many were due, how late the latest of them
// timed out after its complete-by and by which supervisors. An attempt due
// while the leader was cut off times out late if the leader kept its
// lease; with a leader cut off from the store, such lateness past
// lateTimeoutBound is issue 28's first lease defect.
func report(t *testing.T, ph phase, events []domain.RecordedEvent) {
	dispatched, due := 0, 0
	var worst time.Duration
	var worstID string
	actors := map[string]int{}
	// An attempt's dispatch can be recorded after its complete-by (a
	// scheduler cut off from the store appends it when the cut heals): it
	// cannot time out before it is recorded, so lateness counts from the
	// later of the two.
	recorded := map[string]time.Time{}
	attempt := func(task, step string, n int, compensation bool) string {
		return fmt.Sprintf("%s/%s/%d/%v", task, step, n, compensation)
	}
	for _, e := range events {
		in := !e.Recorded.Before(ph.from) && !e.Recorded.After(ph.to)
		switch e.Type {
		case domain.StepDispatchedType, domain.CompensationDispatchedType:
			if in && e.Type == domain.StepDispatchedType {
				dispatched++
			}
			ev, err := domain.DecodeEvent(e.Type, e.Data)
			if err != nil {
				continue
			}
			switch d := ev.(type) {
			case domain.StepDispatched:
				recorded[attempt(d.TaskID, d.Step, d.Attempt, false)] = e.Recorded
			case domain.CompensationDispatched:
				recorded[attempt(d.TaskID, d.Step, d.Attempt, true)] = e.Recorded
			}
		case domain.StepTimedOutType:
			ev, err := domain.DecodeEvent(e.Type, e.Data)
			if err != nil {
				continue
			}
			to := ev.(domain.StepTimedOut)
			if to.CompleteBy.Before(ph.from) || to.CompleteBy.After(ph.to) {
				continue
			}
			due++
			actors[e.Metadata.Actor]++
			since := to.CompleteBy
			if at := recorded[attempt(to.TaskID, to.Step, to.Attempt, to.Compensation)]; at.After(since) {
				since = at
			}
			if late := e.Recorded.Sub(since); late > worst {
				worst, worstID = late, to.TaskID
			}
		}
	}
	t.Logf("phase %q on %s, %v from %s: %d attempts dispatched; %d due, timed out at most %v after their complete-by (%s), by %v",
		ph.name, ph.target, ph.to.Sub(ph.from).Round(time.Millisecond), ph.from.Format("15:04:05.000"), dispatched, due, worst.Round(time.Millisecond), worstID, actors)
	if ph.name == "leader cut off from the store" && worst > lateTimeoutBound {
		if leaderGivesUpWithoutStore {
			assert.Fail(t, "a leader cut off from the store kept its lease",
				"attempts due during the cut timed out up to %v late (bound %v)", worst, lateTimeoutBound)
		} else {
			t.Logf("known defect (issue 28): the leader cut off from the store kept its lease: attempts due during the cut timed out up to %v late (bound %v)",
				worst.Round(time.Millisecond), lateTimeoutBound)
		}
	}
}
