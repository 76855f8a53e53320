package integration_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// requireTools skips a test whose outside tools are missing, or fails it
// when SAGA_REQUIRE_TOOLS is set (as .ci/run, which installs them, does).
func requireTools(t *testing.T, tools ...string) {
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("SAGA_REQUIRE_TOOLS") != "" {
				t.Fatalf("needs %s, which .ci/run should have installed", tool)
			}
			t.Skipf("needs %s (apt-get install kcat jq; .ci/run installs them)", tool)
		}
	}
}

// startShellAgent runs the kcat shell agent for an agent name until the
// test ends.
func startShellAgent(t *testing.T, s *system, name string) {
	t.Helper()
	agent := exec.Command("bash", "testdata/kcat-agent.sh", strings.Join(s.app.KafkaBrokers, ","), name)
	agent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := agent.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, agent.Start())
	t.Cleanup(func() { _ = syscall.Kill(-agent.Process.Pid, syscall.SIGKILL); _ = agent.Wait() })
	go func() {
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			t.Log("kcat-agent:", lines.Text())
		}
	}()
}

// TestShellAgentAndKcatConsumer runs a workflow whose only step is carried
// out by an agent written in shell around kcat, and reads the order's reply
// topic with kcat.
func TestShellAgentAndKcatConsumer(t *testing.T) {
	requireTools(t, "kcat", "jq", "bash")
	bell := &domain.Workflow{Name: "bell", Steps: []domain.StepDefinition{{
		Name: "ring-bell", Agent: "bell", Budget: 20 * time.Second, MaxAttempts: 1, Backoff: fastBackoff,
		Compensation: &domain.CompensationDefinition{Action: "unring-bell", Budget: time.Second, MaxAttempts: 1},
	}}}
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{demo.Workflow(), bell}, ExternalAgents: []string{"bell"}})
	brokers := strings.Join(s.app.KafkaBrokers, ",")

	startShellAgent(t, s, "bell")

	s.publish("bell-1", []byte(`{"orderId":"bell-1","workflow":"bell","replyTo":"reply.bell"}`))
	task := s.awaitTerminal([]string{"bell-1"}, 60*time.Second)["bell-1"]
	require.Equal(t, domain.StateProcessed, task.State, task.Reason)
	assert.Equal(t, []string{domain.TaskSubmittedType, domain.StepDispatchedType, domain.StepSucceededType, domain.TaskProcessedType},
		types(s.stream("bell-1")), "the shell agent completed the step")

	// A non-Go consumer of the reply topic: kcat reads it to the end. The
	// statuses are published after the events are stored, so the last may
	// land a moment after the task is terminal: read again until it has.
	var statuses []string
	require.Eventually(t, func() bool {
		out, err := exec.Command("kcat", "-C", "-b", brokers, "-t", "reply.bell", "-o", "beginning", "-e", "-q", "-f", "%k\t%h\t%s\n").Output()
		require.NoError(t, err)
		statuses = nil
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			parts := strings.SplitN(line, "\t", 3)
			require.Len(t, parts, 3, line)
			assert.Equal(t, "bell-1", parts[0])
			assert.Contains(t, parts[1], "ce_type=saga.task.status")
			var st protocol.TaskStatus
			require.NoError(t, json.Unmarshal([]byte(parts[2]), &st))
			statuses = append(statuses, statusLine(st))
		}
		return len(statuses) >= 4
	}, 30*time.Second, 100*time.Millisecond, "statuses so far: %v", statuses)
	assert.Equal(t, []string{"received", "step-dispatched ring-bell", "step-succeeded ring-bell", "processed"}, statuses)
}
