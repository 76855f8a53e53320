package integration_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/httpapi"
)

// roleProcess is a sagad (or sagad eventstore) child started by
// startRoleProcess.
type roleProcess struct {
	name, http string
	cmd        *exec.Cmd
	logs       *lockedBuffer
	exited     chan struct{}
}

// startRoleProcess starts bin with args (a free --http-listen added when
// http is set) and, for a process with an HTTP listener, waits until its
// /healthz answers 200. The test's end kills what is left.
func startRoleProcess(t *testing.T, bin, name string, http bool, args ...string) *roleProcess {
	t.Helper()
	p := &roleProcess{name: name, logs: &lockedBuffer{}, exited: make(chan struct{})}
	if http {
		p.http = freeAddr(t)
		args = append(args, "--http-listen", p.http)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%s:\n%s", name, p.logs.String())
		}
	})
	if http {
		require.Eventually(t, func() bool {
			select {
			case <-p.exited:
				t.Fatalf("%s stopped: %s", name, p.logs.String())
			default:
			}
			code, _ := p.get(t, "/healthz")
			return code == 200
		}, time.Minute, 50*time.Millisecond, "%s never answered /healthz", name)
	}
	return p
}

// get answers a GET's status and body; 0 when the process does not answer
// within 5 s (a readiness check that asks a server takes 2 s at most).
func (p *roleProcess) get(t *testing.T, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.http + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// readiness answers /readyz's status and its failing checks by name.
func (p *roleProcess) readiness(t *testing.T) (int, map[string]string, []string) {
	t.Helper()
	code, body := p.get(t, "/readyz")
	var answer struct {
		Checks []httpapi.Check `json:"checks"`
	}
	_ = json.Unmarshal([]byte(body), &answer)
	failing, names := map[string]string{}, []string{}
	for _, c := range answer.Checks {
		names = append(names, c.Name)
		if !c.OK {
			failing[c.Name] = c.Error
		}
	}
	return code, failing, names
}

// TestSagadRefusesEmptyAndUnknownRoles: sagad stops at once with a clear
// error for a role list that names nothing, an unknown role, or the
// broker role with external brokers.
func TestSagadRefusesEmptyAndUnknownRoles(t *testing.T) {
	bin := buildSagad(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--roles", ""}, "no role in"},
		{[]string{"--roles", " , "}, "no role in"},
		{[]string{"--roles", "scheduler,schedular"}, `unknown role \"schedular\"`},
		{[]string{"--roles", "broker", "--kafka-brokers", "127.0.0.1:1"}, "broker role"},
	} {
		cmd := exec.Command(bin, append([]string{"--data", t.TempDir(), "--kafka-listen", "127.0.0.1:0", "--eventstore-listen", "127.0.0.1:0",
			"--http-listen", "127.0.0.1:0"}, c.args...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%v: %s", c.args, out)
		assert.Contains(t, string(out), c.want, c.args)
		assert.NotContains(t, string(out), "saga is running", c.args)
	}
}

// TestSplitRolesAreObservable starts saga split by role as separate
// processes (an event store, a broker-only sagad, scheduler+supervisor,
// agents, submitter+status, api) and checks that every one serves
// /healthz, /readyz with the checks of what it runs, and /metrics, and
// that only the api serves the API; that a process's readiness goes false
// while its event store or broker does not answer, naming the check, and
// back once it does, while its /metrics keeps answering at once; and that
// an agents process exits promptly on SIGTERM with a call in flight, and
// within its --shutdown-timeout when its broker does not answer.
func TestSplitRolesAreObservable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six processes")
	}
	bin := buildSagad(t)
	esAddr, kafkaAddr := freeAddr(t), freeAddr(t)
	es := startRoleProcess(t, bin, "eventstore", false, "eventstore", "--listen", esAddr, "--data", t.TempDir())
	broker := startRoleProcess(t, bin, "broker", true, "--roles", "broker", "--data", t.TempDir(), "--kafka-listen", kafkaAddr)
	common := []string{"--kafka-brokers", kafkaAddr, "--eventstore", "esdb://" + esAddr + "?tls=false"}
	role := func(name, roles string, more ...string) *roleProcess {
		args := append([]string{"--roles", roles, "--data", t.TempDir(), "--instance", name}, common...)
		return startRoleProcess(t, bin, name, true, append(args, more...)...)
	}
	scheduler := role("scheduler", "scheduler,supervisor")
	// Every payment call hangs, so that the agents have a call in flight
	// when they are stopped.
	agents := role("agents", "agents", "--fault", "payment=hang")
	submitter := role("submitter", "submitter,status")
	api := role("api", "api")

	for _, c := range []struct {
		p      *roleProcess
		checks []string
		metric string
	}{
		{broker, []string{"kafka", "resources"}, "saga_kafka_topics"},
		{scheduler, []string{"eventstore", "kafka", "followers", "consumers", "resources"}, "saga_commands_sent_total"},
		{agents, []string{"eventstore", "kafka", "followers", "consumers", "resources"}, "saga_agent_commands_total"},
		{submitter, []string{"eventstore", "kafka", "followers", "consumers", "resources"}, "saga_orders_total"},
		{api, []string{"projection", "eventstore", "kafka", "followers", "resources"}, "saga_tasks"},
	} {
		require.Eventually(t, func() bool { code, _, _ := c.p.readiness(t); return code == 200 }, time.Minute, 100*time.Millisecond,
			"%s never ready", c.p.name)
		_, _, names := c.p.readiness(t)
		assert.Equal(t, c.checks, names, c.p.name)
		code, body := c.p.get(t, "/metrics")
		assert.Equal(t, 200, code, c.p.name)
		assert.Contains(t, body, c.metric, c.p.name)
		code, _ = c.p.get(t, "/api/tasks")
		if c.p == api {
			assert.Equal(t, 200, code)
		} else {
			assert.Equal(t, 404, code, "%s serves no API", c.p.name)
		}
	}

	// The event store stops answering (SIGSTOP: its connections hang, as
	// through a partition), then answers again.
	require.NoError(t, es.cmd.Process.Signal(syscall.SIGSTOP))
	for _, p := range []*roleProcess{scheduler, agents, submitter, api} {
		require.Eventually(t, func() bool {
			code, failing, _ := p.readiness(t)
			_, named := failing["eventstore"]
			return code == 503 && named
		}, 30*time.Second, 100*time.Millisecond, "%s stayed ready without its event store", p.name)
		began := time.Now()
		code, _ := p.get(t, "/metrics")
		assert.Equal(t, 200, code, p.name)
		assert.Less(t, time.Since(began), time.Second, "%s's /metrics waited for the event store", p.name)
	}
	require.NoError(t, es.cmd.Process.Signal(syscall.SIGCONT))
	for _, p := range []*roleProcess{scheduler, agents, submitter, api} {
		require.Eventually(t, func() bool { code, _, _ := p.readiness(t); return code == 200 }, time.Minute, 100*time.Millisecond,
			"%s not ready again once the event store answered", p.name)
	}

	// The broker stops answering, then answers again.
	require.NoError(t, broker.cmd.Process.Signal(syscall.SIGSTOP))
	for _, p := range []*roleProcess{scheduler, agents} {
		require.Eventually(t, func() bool {
			code, failing, _ := p.readiness(t)
			_, named := failing["kafka"]
			return code == 503 && named
		}, 30*time.Second, 100*time.Millisecond, "%s stayed ready without its broker", p.name)
		_, failing, _ := p.readiness(t)
		assert.Contains(t, failing, "consumers", "%s: its consumers cannot be in their groups", p.name)
		began := time.Now()
		code, _ := p.get(t, "/metrics")
		assert.Equal(t, 200, code, p.name)
		assert.Less(t, time.Since(began), time.Second, "%s's /metrics waited for the broker", p.name)
	}
	require.NoError(t, broker.cmd.Process.Signal(syscall.SIGCONT))
	for _, p := range []*roleProcess{broker, scheduler, agents, submitter, api} {
		require.Eventually(t, func() bool { code, _, _ := p.readiness(t); return code == 200 }, time.Minute, 100*time.Millisecond,
			"%s not ready again once the broker answered", p.name)
	}

	// An order whose payment call hangs in the agents process.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{Brokers: []string{kafkaAddr}})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Submit(ctx, "split-1", map[string]any{"items": []string{"book"}}))
	inFlight := regexp.MustCompile(`saga_agent_instance_in_flight\{agent="payment",instance="[^"]*"\} (\d+)`)
	require.Eventually(t, func() bool {
		_, body := scheduler.get(t, "/metrics")
		for _, m := range inFlight.FindAllStringSubmatch(body, -1) {
			if n, _ := strconv.Atoi(m[1]); n > 0 {
				return true
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond, "the payment call never started")
	began := time.Now()
	require.NoError(t, agents.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-agents.exited:
		t.Logf("the agents process exited %v after SIGTERM, a payment call in flight", time.Since(began).Round(time.Millisecond))
	case <-time.After(4 * time.Second):
		t.Fatalf("the agents process did not exit within 4 s of SIGTERM: %s", agents.logs.String())
	}
	assert.Equal(t, 0, agents.cmd.ProcessState.ExitCode(), agents.logs.String())
	assert.False(t, strings.Contains(agents.logs.String(), "did not stop"), agents.logs.String())

	// Stopped while its broker does not answer, an agents process cannot
	// leave its groups: it exits once its --shutdown-timeout has passed.
	agents2 := role("agents-2", "agents", "--shutdown-timeout", "2s")
	require.Eventually(t, func() bool { code, _, _ := agents2.readiness(t); return code == 200 }, time.Minute, 100*time.Millisecond,
		"agents-2 never ready")
	require.NoError(t, broker.cmd.Process.Signal(syscall.SIGSTOP))
	began = time.Now()
	require.NoError(t, agents2.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-agents2.exited:
		t.Logf("the agents process exited %v after SIGTERM, its broker not answering", time.Since(began).Round(time.Millisecond))
	case <-time.After(4 * time.Second):
		t.Fatalf("the agents process did not exit within 4 s of SIGTERM with --shutdown-timeout 2s: %s", agents2.logs.String())
	}
	require.NoError(t, broker.cmd.Process.Signal(syscall.SIGCONT))
	assert.Contains(t, agents2.logs.String(), "did not stop within the shutdown timeout")
}
