package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestMain lets the test binary be sagactl: a test runs it again with
// SAGACTL_TEST_MAIN set and sagactl's arguments, as an operator would run
// the command, exit code and all.
func TestMain(m *testing.M) {
	if os.Getenv("SAGACTL_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// saga is an engine under test: embedded Kafka and event store, the demo
// agents and services, the API.
type saga struct {
	t   *testing.T
	app *engine.App
	api string
}

// fastBackoff keeps retries quick.
var fastBackoff = domain.Backoff{Initial: 20 * time.Millisecond, Multiplier: 2, Max: 100 * time.Millisecond, Jitter: 0.2}

// testWorkflows: "order" is the demo workflow; "quick" only reserves
// stock; "strict" reserves and charges, and stops in Error when the
// charge fails.
func testWorkflows(budget time.Duration) []*domain.Workflow {
	order := demo.Workflow().WithBudget(budget, fastBackoff)
	quick := &domain.Workflow{Name: "quick", Steps: []domain.StepDefinition{order.Steps[0]}}
	strict := &domain.Workflow{Name: "strict", Steps: append([]domain.StepDefinition(nil), order.Steps[:2]...)}
	strict.Steps[1].OnExhausted = domain.ErrorOnExhausted
	return []*domain.Workflow{order, quick, strict}
}

func startSaga(t *testing.T, cfg engine.Config) *saga {
	t.Helper()
	cfg.DataDir = t.TempDir()
	cfg.KafkaListen, cfg.EventStoreListen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.DemoAgents = true
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.SupervisorInterval == 0 {
		cfg.SupervisorInterval = 50 * time.Millisecond
	}
	app, err := engine.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(app.Close)
	for _, ready := range []<-chan struct{}{app.Scheduler.Ready(), app.Supervisor.Ready(), app.Tasks.Ready()} {
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			t.Fatal("saga did not catch up")
		}
	}
	return &saga{t: t, app: app, api: "http://" + app.HTTPAddr}
}

// refusingPayments starts an engine whose payment service refuses every
// charge, so that orders of the strict workflow stop in Error.
func refusingPayments(t *testing.T, supervisorInterval time.Duration) *saga {
	return startSaga(t, engine.Config{Workflows: testWorkflows(time.Second), SupervisorInterval: supervisorInterval,
		Faults: map[string][]demo.Fault{"payment": {{Mode: demo.FaultPermanent, Rate: 1}}}})
}

// intoError submits an order of the strict workflow for each id and waits
// until every one is in Error.
func (s *saga) intoError(ids ...string) {
	s.t.Helper()
	want := map[string]domain.TaskState{}
	var records []*kgo.Record
	for _, id := range ids {
		want[id] = domain.StateError
		records = append(records, order(id, `{"orderId":"`+id+`","workflow":"strict"}`))
	}
	s.publish(protocol.OrdersTopic, records...)
	s.awaitStates(want)
}

// run runs sagactl with args against the engine, stdin not a terminal.
func (s *saga) run(args ...string) (stdout, stderr string, code int) {
	return s.runAt(s.api, args...)
}

// runAt runs sagactl with its API at api.
func (s *saga) runAt(api string, args ...string) (stdout, stderr string, code int) {
	s.t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SAGACTL_TEST_MAIN=1", "SAGA_CONFIG="+os.DevNull, "USER=tester", "SAGA_API="+api,
		"SAGA_KAFKA_BROKERS="+strings.Join(s.app.KafkaBrokers, ","), "SAGA_EVENTSTORE="+s.app.EventStoreURL)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), errOut.String(), exit.ExitCode()
	}
	require.NoError(s.t, err, errOut.String())
	return out.String(), errOut.String(), 0
}

// runJSON runs sagactl with -o json, requires it to succeed, and decodes
// what it printed into v.
func (s *saga) runJSON(v any, args ...string) {
	s.t.Helper()
	out, errOut, code := s.run(append(args, "-o", "json")...)
	require.Equal(s.t, 0, code, "sagactl %v: %s%s", args, out, errOut)
	require.NoError(s.t, json.Unmarshal([]byte(out), v), out)
}

// publish produces records to a topic as any application would.
func (s *saga) publish(topic string, records ...*kgo.Record) {
	s.t.Helper()
	client, err := kgo.NewClient(kgo.SeedBrokers(s.app.KafkaBrokers...), kgo.DefaultProduceTopic(topic))
	require.NoError(s.t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(s.t, client.ProduceSync(ctx, records...).FirstErr())
}

func order(id, body string) *kgo.Record { return &kgo.Record{Key: []byte(id), Value: []byte(body)} }

// awaitStates waits until the task view shows each task in its state.
func (s *saga) awaitStates(want map[string]domain.TaskState) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		for id, state := range want {
			t, ok, err := s.app.Tasks.Get(context.Background(), id)
			if err != nil || !ok || t.State != state {
				return false
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond, "tasks in %v", want)
}

// TestHelpCompletionAndHostilePaging: every new command has help with
// examples and is completed, a page too large is capped by the API, and a
// server that is not there is reported within seconds.
func TestHelpCompletionAndHostilePaging(t *testing.T) {
	s := startSaga(t, engine.Config{Workflows: testWorkflows(time.Second)})
	for _, cmd := range []string{"alerts", "deadletters", "overdue", "retry", "cancel"} {
		out, errOut, code := s.run(cmd, "--help")
		assert.Equal(t, 0, code, cmd)
		assert.Contains(t, out+errOut, "examples:", cmd)
	}
	out, _, code := s.run("completion", "bash")
	require.Equal(t, 0, code)
	for _, want := range []string{"alerts", "deadletters) COMPREPLY=($(compgen -W \"list redrive", "overdue", "--reason-contains", "--dry-run"} {
		assert.Contains(t, out, want)
	}
	var list protocol.TaskList
	s.runJSON(&list, "tasks", "--limit", "100000000")
	assert.Empty(t, list.Tasks)

	began := time.Now()
	_, errOut, code := s.runAt("http://127.0.0.1:1", "retry", "--state", "Error", "--dry-run")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "is sagad running?")
	assert.Less(t, time.Since(began), 5*time.Second)
}
