package integration_test

import (
	"bufio"
	"fmt"
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
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
)

// childEnv makes the test binary run one part of the system on its own, as
// a separate process that a test can kill with SIGKILL.
const childEnv = "SAGA_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		runChild(spec)
		return
	}
	if spec := os.Getenv(chaosEnv); spec != "" {
		runChaosChild(spec)
		return
	}
	if spec := os.Getenv(agentChildEnv); spec != "" {
		runAgentChild(spec)
		return
	}
	if os.Getenv(shopEnv) != "" {
		runShop()
		return
	}
	code := m.Run()
	_ = os.RemoveAll("../tmp-test-bin")
	os.Exit(code)
}

// runChild runs the roles named in spec ("roles|brokers|eventstore|instance")
// until killed.
func runChild(spec string) {
	parts := strings.Split(spec, "|")
	roles, err := engine.ParseRoles(parts[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	a, err := engine.Start(engine.Config{Roles: roles, KafkaBrokers: kafka.SplitBrokers(parts[1]), EventStoreURL: parts[2],
		Instance: parts[3], Logger: testLogger(), SupervisorInterval: 50 * time.Millisecond, CheckpointEvery: 200 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if a.Scheduler != nil {
		<-a.Scheduler.Ready()
	}
	fmt.Println("ready")
	select {}
}

// startChild starts the test binary as a process running roles against the
// system's servers, and returns once it has caught up.
func (s *system) startChild(roles, instance string) *exec.Cmd {
	s.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{roles, strings.Join(s.app.KafkaBrokers, ","), s.app.EventStoreURL, instance}, "|"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(s.t, err)
	require.NoError(s.t, cmd.Start())
	s.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	require.True(s.t, lines.Scan(), "child %s did not start", instance)
	require.Equal(s.t, "ready", lines.Text())
	return cmd
}

// TestTwoSchedulersAndTwoSupervisorsUnderFaults runs a second scheduler and
// supervisor beside the first, 500 orders, 20 % transient failures and 5 %
// hung calls at every service.
func TestTwoSchedulersAndTwoSupervisorsUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("500 orders under faults")
	}
	flaky := []demo.Fault{{Mode: demo.FaultTransient, Rate: 0.2}, {Mode: demo.FaultHang, Rate: 0.05}}
	wf := fastWorkflow(400 * time.Millisecond)
	s := startSystem(t, engine.Config{Instance: "first", Workflows: []*domain.Workflow{wf},
		Faults: map[string][]demo.Fault{"inventory": flaky, "payment": flaky, "shipping": flaky}})
	second, err := engine.Start(engine.Config{Instance: "second", Roles: []engine.Role{engine.RoleScheduler, engine.RoleSupervisor},
		KafkaBrokers: s.app.KafkaBrokers, EventStoreURL: s.app.EventStoreURL, Workflows: []*domain.Workflow{wf},
		Logger: testLogger(), SupervisorInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(second.Close)
	<-second.Scheduler.Ready()

	ids := orderIDs("scale", 500)
	s.publishOrders(ids)
	tasks := s.awaitTerminal(ids, 3*time.Minute)

	states := map[domain.TaskState]int{}
	lockedBy := map[string]int{}
	for _, id := range ids {
		task := checkStream(t, id, s.stream(id))
		states[task.State]++
		assert.Equal(t, tasks[id].State, task.State)
		for _, st := range task.Steps {
			if st.LockedBy != "" {
				lockedBy[st.LockedBy]++
			}
		}
	}
	t.Logf("states %v, dispatches by %v, first %+v, second %+v, supervisors %+v / %+v", states, lockedBy,
		s.app.Scheduler.Stats(), second.Scheduler.Stats(), s.app.Supervisor.Stats(), second.Supervisor.Stats())
	assert.Equal(t, len(ids), states[domain.StateProcessed]+states[domain.StateCompensated], "every task processed or compensated: %v", states)
	assert.Positive(t, states[domain.StateProcessed])
	assert.Len(t, lockedBy, 2, "both schedulers dispatched: %v", lockedBy)
	assert.Positive(t, s.app.Supervisor.Stats().Timeouts+second.Supervisor.Stats().Timeouts, "hung calls timed out")
	for _, svc := range s.app.Services {
		for key, n := range svc.Effects() {
			assert.Equal(t, 1, n, "%s took effect %d times at %s", key, n, svc.Name)
		}
	}
}

// TestSchedulerKilledMidRunFinishesInFlightTasks runs the scheduler as a
// process of its own, kills it with SIGKILL while orders are in flight and
// starts it again.
func TestSchedulerKilledMidRunFinishesInFlightTasks(t *testing.T) {
	roles := []engine.Role{engine.RoleSubmitter, engine.RoleSupervisor, engine.RoleAgents, engine.RoleAPI}
	s := startSystem(t, engine.Config{Roles: roles})
	child := s.startChild("scheduler", "scheduler-a")
	ids := orderIDs("killed", 300)
	s.publishOrders(ids)
	s.awaitTerminal(ids[:30], 60*time.Second)
	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	s.startChild("scheduler", "scheduler-b")
	tasks := s.awaitTerminal(ids, 2*time.Minute)
	for _, id := range ids {
		require.Equal(t, domain.StateProcessed, tasks[id].State, id)
		checkStream(t, id, s.stream(id))
	}
	for _, svc := range s.app.Services {
		for key, n := range svc.Effects() {
			assert.Equal(t, 1, n, "%s took effect %d times at %s", key, n, svc.Name)
		}
	}
}
