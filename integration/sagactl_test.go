package integration_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// workflows for outcomes chosen by the order: "order" compensates when the
// payment is refused, "quick" only reserves stock, "strict" stops in Error.
func outcomeWorkflows() []*domain.Workflow {
	order := fastWorkflow(time.Second)
	quick := &domain.Workflow{Name: "quick", Steps: []domain.StepDefinition{order.Steps[0]}}
	strict := &domain.Workflow{Name: "strict", Steps: append([]domain.StepDefinition(nil), order.Steps[:2]...)}
	strict.Steps[1].OnExhausted = domain.ErrorOnExhausted
	return []*domain.Workflow{order, quick, strict}
}

func (s *system) sagactl(args ...string) (string, int) {
	s.t.Helper()
	cmd := exec.Command(sagactl(s.t), args...)
	cmd.Env = append(cmd.Environ(), "SAGA_API=http://"+s.app.HTTPAddr, "SAGA_EVENTSTORE="+s.app.EventStoreURL,
		"SAGA_KAFKA_BROKERS="+strings.Join(s.app.KafkaBrokers, ","))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	}
	require.NoError(s.t, err, string(out))
	return string(out), 0
}

func TestSagactlWatchExitCodes(t *testing.T) {
	s := startSystem(t, engine.Config{Workflows: outcomeWorkflows(),
		Faults: map[string][]demo.Fault{"payment": {{Mode: demo.FaultPermanent, Rate: 1}}}})
	s.publish("w-ok", []byte(`{"orderId":"w-ok","workflow":"quick"}`))
	s.publish("w-comp", []byte(`{"orderId":"w-comp"}`))
	s.publish("w-err", []byte(`{"orderId":"w-err","workflow":"strict"}`))
	for id, want := range map[string]int{"w-ok": 0, "w-comp": 2, "w-err": 3} {
		out, code := s.sagactl("watch", "--timeout", "30s", id)
		assert.Equal(t, want, code, "%s:\n%s", id, out)
		assert.Contains(t, out, "received", id)
	}
	out, code := s.sagactl("watch", "--timeout", "1s", "never-submitted")
	assert.Equal(t, 4, code, out)
	out, code = s.sagactl("watch")
	assert.Equal(t, 1, code, out)

	out, code = s.sagactl("watch", "--timeout", "2s", "--topic", protocol.StatusTopic)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "w-comp")
	assert.Contains(t, out, "compensated")
}

func TestSagactlAuditAndReplay(t *testing.T) {
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{fastWorkflow(300 * time.Millisecond)},
		Faults: faults("shipping", demo.Fault{Mode: demo.FaultHang, Rate: 1})})
	s.publish("audit-1", []byte(`{"orderId":"audit-1"}`))
	s.awaitTerminal([]string{"audit-1"}, 30*time.Second)
	s.awaitView("audit-1", domain.StateCompensated)

	out, code := s.sagactl("audit", "audit-1")
	require.Equal(t, 0, code, out)
	for _, want := range []string{"StepTimedOut", "StepRetryScheduled", "CompensationRequested", "StepCompensated",
		"supervisor/", "State: Compensated", "The live view agrees with the replay."} {
		assert.Contains(t, out, want)
	}
	// Shipping hangs, so its three attempts time out; on a busy machine
	// another step's attempt can outlast the 300 ms budget too, so count
	// the timeouts the stream holds rather than assume three.
	timeouts := 0
	for _, e := range s.stream("audit-1") {
		if e.Type == domain.StepTimedOutType {
			timeouts++
		}
	}
	assert.GreaterOrEqual(t, timeouts, 3, "the hanging step's attempts timed out")
	assert.Equal(t, timeouts, strings.Count(out, "StepTimedOut "), "every timeout is listed")

	out, code = s.sagactl("audit", "--at", "4", "audit-1")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "up to revision 4")
	assert.Contains(t, out, "State: Processing")

	out, code = s.sagactl("audit", "audit-1", "--json")
	require.Equal(t, 0, code, out)
	var report struct {
		Timeline []struct{ Event string }
		State    struct{ State string }
		Drift    []string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &report))
	assert.Equal(t, "Compensated", report.State.State)
	assert.Equal(t, len(s.stream("audit-1")), len(report.Timeline))
	assert.Empty(t, report.Drift)

	out, code = s.sagactl("audit", "nope")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "task not found")

	out, code = s.sagactl("tasks", "--state", "Compensated", "--output", "json")
	require.Equal(t, 0, code, out)
	var list protocol.TaskList
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list.Tasks, 1)
	assert.Equal(t, "audit-1", list.Tasks[0].ID)
	out, code = s.sagactl("get", "audit-1")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "STEP")
	assert.Contains(t, out, "schedule-shipping")
	out, code = s.sagactl("audit", "--help")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "examples:")
	out, code = s.sagactl("completion", "bash")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "complete -o default -F _sagactl sagactl")
	script := filepath.Join(t.TempDir(), "sagactl.bash")
	require.NoError(t, os.WriteFile(script, []byte(out), 0o644))
	syntax, err := exec.Command("bash", "-n", script).CombinedOutput()
	require.NoError(t, err, string(syntax))

	out, code = s.sagactl("replay")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "replayed")
	assert.Contains(t, out, "events/s")
	assert.Contains(t, out, "Compensated")
}
