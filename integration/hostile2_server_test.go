package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/agent"
	sagaclient "github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// apiRequest sends a request to the system's API with the given Host and
// Origin headers (none when empty) and returns the status and body.
func (s *system) apiRequest(method, path, host, origin, body string) (int, string) {
	s.t.Helper()
	req, err := http.NewRequest(method, "http://"+s.app.HTTPAddr+path, strings.NewReader(body))
	require.NoError(s.t, err)
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp.StatusCode, string(raw)
}

// TestHostile2DNSRebindingIsRefused replays a page on a name rebound to the
// API's address in dev mode (no tokens): the browser sends that name as
// Host and as Origin. It cancelled a task (202) and registered a workflow
// (201); now it reads and acts on nothing, while the API's own names and a
// configured one work.
func TestHostile2DNSRebindingIsRefused(t *testing.T) {
	s := startSystem(t, engine.Config{HTTPAllowedHosts: []string{"saga.test"}})
	ids := orderIDs("rebind", 1)
	s.publishOrders(ids)
	s.awaitTerminal(ids, 60*time.Second)
	_, port, _ := strings.Cut(s.app.HTTPAddr, ":")
	rebound := "rebind.attacker.example:" + port
	origin := "http://" + rebound

	code, body := s.apiRequest(http.MethodPost, "/api/tasks/"+ids[0]+"/cancel", rebound, origin, `{"by":"page"}`)
	assert.Equal(t, http.StatusMisdirectedRequest, code, body)
	assert.Contains(t, body, "--http-allowed-hosts")
	code, _ = s.apiRequest(http.MethodPost, "/api/workflows", rebound, origin, `{"name":"evil","steps":[{"name":"a","agent":"http"}]}`)
	assert.Equal(t, http.StatusMisdirectedRequest, code)
	code, _ = s.apiRequest(http.MethodGet, "/api/tasks", rebound, "", "")
	assert.Equal(t, http.StatusMisdirectedRequest, code, "reads too")
	code, _ = s.apiRequest(http.MethodGet, "/api/workflows/evil", "", "", "")
	assert.Equal(t, http.StatusNotFound, code, "nothing was registered")
	for _, e := range s.stream(ids[0]) {
		assert.NotEqual(t, domain.TaskCancelledType, e.Type, "nothing was cancelled")
	}

	for _, host := range []string{"localhost:" + port, "127.0.0.1:" + port, "saga.test:" + port} {
		code, _ = s.apiRequest(http.MethodGet, "/api/tasks", host, "", "")
		assert.Equal(t, http.StatusOK, code, host)
	}
	code, _ = s.apiRequest(http.MethodGet, "/readyz", rebound, "", "")
	assert.NotEqual(t, http.StatusMisdirectedRequest, code, "probes answer by any name")
}

// TestHostile2ListsCarryNoResults: steps that return 60 KiB each made every
// task row 180 KiB, and a list of them carried every result. A list now
// carries the steps' sizes, not their results, and one task still has them.
func TestHostile2ListsCarryNoResults(t *testing.T) {
	big := strings.Repeat("r", 60<<10)
	handler := func(context.Context, agent.Request) (any, error) { return map[string]string{"blob": big}, nil }
	agents := map[string]agent.Handler{}
	for _, name := range demo.Workflow().Agents() {
		agents[name] = handler
	}
	s := startSystem(t, engine.Config{Agents: agents})
	ids := orderIDs("bigresult", 10)
	s.publishOrders(ids)
	s.awaitTerminal(ids, 60*time.Second)
	for _, id := range ids {
		s.awaitView(id, domain.StateProcessed)
	}

	code, list := s.apiRequest(http.MethodGet, "/api/tasks?limit=1000", "", "", "")
	require.Equal(t, http.StatusOK, code)
	assert.Less(t, len(list), 64<<10, "10 tasks of 180 KiB of results list in less than one result")
	assert.NotContains(t, list, big[:100])
	assert.Contains(t, list, fmt.Sprintf(`"resultBytes":%d`, len(big)+len(`{"blob":""}`)))
	code, one := s.apiRequest(http.MethodGet, "/api/tasks/"+ids[0], "", "", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, one, big, "GET /api/tasks/ID carries the results")
}

// TestHostile2FullDiskUnderTheTaskView fills the disk of the task view
// (a small tmpfs, where one can be mounted: root with CAP_SYS_ADMIN) while
// orders run. The view's "database or disk is full" stopped sagad; now the
// process goes on, /readyz names the failing view, and once space returns
// the view catches up from its checkpoint by itself.
func TestHostile2FullDiskUnderTheTaskView(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "taskview")
	require.NoError(t, os.Mkdir(dir, 0o755))
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	s := startSystem(t, engine.Config{TaskViewDir: dir})
	select {
	case <-s.app.Tasks.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the task view did not catch up")
	}

	filler := fillDisk(t, dir)
	ids := orderIDs("diskfull", 200)
	s.publishOrders(ids)
	s.awaitTerminal(ids, 120*time.Second)
	require.Eventually(t, func() bool {
		code, failing := s.readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(failing["projection"], "full")
	}, 30*time.Second, 20*time.Millisecond, "readiness names the task view that cannot write")
	select {
	case err := <-s.app.Failed():
		t.Fatalf("a full disk stopped the process: %v", err)
	default:
	}
	code, _ := s.apiRequest(http.MethodGet, "/api/tasks", "", "", "")
	assert.Equal(t, http.StatusOK, code, "the view serves what it committed")

	require.NoError(t, os.Remove(filler))
	for _, id := range ids {
		s.awaitView(id, domain.StateProcessed)
	}
	require.Eventually(t, func() bool {
		code, _ := s.readyz()
		return code == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "ready again once it caught up")
	select {
	case err := <-s.app.Failed():
		t.Fatalf("the process stopped: %v", err)
	default:
	}
}

// fillDisk writes a file in dir until the file system is full and returns
// its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 16<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			require.True(t, errors.Is(err, syscall.ENOSPC), "filling the disk: %v", err)
			return path
		}
	}
}

// lowFileLimit lowers the process's soft RLIMIT_NOFILE for the test, as
// `ulimit -n` does for a child; it is restored after.
func lowFileLimit(t *testing.T, limit uint64) {
	t.Helper()
	var old syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old))
	if old.Max < limit {
		t.Skipf("the hard file limit %d is below %d", old.Max, limit)
	}
	low := old
	low.Cur = limit
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// topicNames lists the broker's topics through a fresh client (a client
// answers a listing from its metadata cache for a while).
func (s *system) topicNames() []string {
	s.t.Helper()
	client, err := kgo.NewClient(kgo.SeedBrokers(s.app.KafkaBrokers...))
	require.NoError(s.t, err)
	defer client.Close()
	listed, err := kadm.NewClient(client).ListTopics(ctx(s.t, 10*time.Second))
	require.NoError(s.t, err)
	return listed.Names()
}

// TestHostile2DistinctReplyTopicsLeaveTheEngineServing replays orders that
// each name a new reply topic, under a low file limit (1024; each topic
// holds 2 descriptors per partition written in the embedded broker). They created a
// topic each, refused orders too, until the process ran out of descriptors:
// the Kafka listener stopped without a word, fsyncs failed, /readyz stayed
// green and good orders got no answer; then, with a cap, the flood kept the
// cap full and a new caller's reply topic was refused. Now refused orders
// create no topic; the reply topics stay within the cap; a caller that
// created its reply topic before it submits (the Go client) gets its
// statuses while the flood goes on; and a new caller whose topic saga
// auto-creates is served too, its topic taking the place of the oldest the
// flood's statuses auto-created once that one is past its grace.
func TestHostile2DistinctReplyTopicsLeaveTheEngineServing(t *testing.T) {
	lowFileLimit(t, 1024)
	// Go agents, not the demo's HTTP services, whose connections would
	// take the descriptors this test is about.
	agents := map[string]agent.Handler{}
	for _, name := range demo.Workflow().Agents() {
		agents[name] = func(context.Context, agent.Request) (any, error) { return map[string]bool{"ok": true}, nil }
	}
	s := startSystem(t, engine.Config{Agents: agents, KafkaRetention: &broker.Retention{Interval: 100 * time.Millisecond, IdleReplyTopicAfter: time.Hour}})
	_, maxTopics, err := s.app.EmbeddedBroker().TopicCapacity()
	require.NoError(t, err)
	require.Positive(t, maxTopics)
	client := s.producer()
	send := func(prefix string, n int, order func(i int) map[string]any) []string {
		ids := orderIDs(prefix, n)
		recs := make([]*kgo.Record, n)
		for i, id := range ids {
			body, err := json.Marshal(order(i))
			require.NoError(t, err)
			recs[i] = &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte(id), Value: body}
		}
		require.NoError(t, client.ProduceSync(ctx(t, 60*time.Second), recs...).FirstErr())
		return ids
	}
	caller, err := sagaclient.New(ctx(t, 10*time.Second), sagaclient.Config{Brokers: s.app.KafkaBrokers})
	require.NoError(t, err)
	defer caller.Close()

	refused := send("refused", 200, func(i int) map[string]any {
		return map[string]any{"orderId": fmt.Sprintf("refused-%04d", i), "workflow": "no-such-workflow", "replyTo": fmt.Sprintf("reply.refused-%d", i)}
	})
	flood := func(i int) map[string]any {
		return map[string]any{"orderId": fmt.Sprintf("distinct-%04d", i), "items": []map[string]any{{"sku": "book", "qty": 1}},
			"replyTo": fmt.Sprintf("reply.distinct-%d", i)}
	}
	distinct := send("distinct", 300, flood)
	// The caller's order goes in the middle of the flood.
	out, err := caller.Run(ctx(t, 120*time.Second), "caller-1", map[string]any{"items": []map[string]any{{"sku": "book", "qty": 1}}})
	require.NoError(t, err, "a caller whose reply topic exists is answered during the flood")
	assert.Equal(t, "processed", out.Final.Status)
	distinct = append(distinct, send("distinct", 300, func(i int) map[string]any { return flood(i + 300) })...)
	s.awaitTerminal(distinct, 120*time.Second)
	require.Eventually(t, func() bool { return s.app.Submitter.Stats().Rejected >= int64(len(refused)) }, 60*time.Second, 10*time.Millisecond)

	var createdByRefused []string
	topics := s.topicNames()
	for _, name := range topics {
		if strings.HasPrefix(name, "reply.refused-") {
			createdByRefused = append(createdByRefused, name)
		}
	}
	assert.Empty(t, createdByRefused, "refused orders created reply topics")
	assert.LessOrEqual(t, len(topics), maxTopics, "the topics stay within the cap")
	assert.Contains(t, topics, caller.ReplyTopic(), "a caller's own reply topic is never deleted to make room")
	code, body := s.readyz()
	assert.Equal(t, http.StatusOK, code, "the cap holds topics it may delete: ready: %s", body)

	good := orderIDs("good", 5)
	s.publishOrders(good)
	for _, id := range good {
		s.awaitStatus(protocol.StatusTopic, id, domain.StateProcessed)
	}
	// A new caller that lets saga create its reply topic gets it too, once
	// the flood's topics are past their grace (broker.DefaultReplyTopicGrace):
	// until then its statuses are refused, and it tries again.
	answered := false
	for try := 0; try < 5 && !answered; try++ {
		id, topic := fmt.Sprintf("after-%04d", try), fmt.Sprintf("reply.after-%d", try)
		send(id, 1, func(int) map[string]any {
			return map[string]any{"orderId": id, "items": []map[string]any{{"sku": "book", "qty": 1}}, "replyTo": topic}
		})
		// A consumer of a topic that does not exist yet sees it at its
		// next metadata refresh, up to 5 s later.
		answered = s.statusArrives(topic, id, domain.StateProcessed, 15*time.Second)
	}
	assert.True(t, answered, "a new auto-created reply topic takes the place of an old one")
	assert.Positive(t, s.app.EmbeddedBroker().EvictedTopics(), "the flood's reply topics made room")
	select {
	case err := <-s.app.Failed():
		t.Fatalf("the process stopped: %v", err)
	default:
	}
}
