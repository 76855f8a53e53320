package engine_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/engine"
)

// partialStart is a process that runs every part there is: all roles,
// the embedded event store and Kafka, demo agents and a Go agent, the
// metrics listener and, through a stand-in OTLP collector, tracing. Its
// listeners are on fixed free addresses, so that the test can tell
// whether they still accept once Start has failed.
type partialStart struct {
	cfg   engine.Config
	addrs []string
}

func newPartialStart(t *testing.T) partialStart {
	t.Helper()
	p := partialStart{cfg: engine.Config{
		DataDir: t.TempDir(), KafkaListen: freeAddr(t), EventStoreListen: freeAddr(t), HTTPListen: freeAddr(t), MetricsListen: freeAddr(t),
		Instance: "partial", DemoAgents: true, Logger: slog.New(slog.DiscardHandler),
		Agents: map[string]agent.Handler{"worker": func(context.Context, agent.Request) (any, error) { return nil, nil }},
	}}
	p.addrs = []string{p.cfg.KafkaListen, p.cfg.EventStoreListen, p.cfg.HTTPListen, p.cfg.MetricsListen}
	return p
}

// assertNothingLeft checks that no listener of the process accepts.
func (p partialStart) assertNothingLeft(t *testing.T) {
	t.Helper()
	for _, addr := range p.addrs {
		assertRefused(t, addr)
	}
}

// warmUp starts a stand-in OTLP collector for the test's spans, then
// starts and closes a whole process once, so that the goroutines libraries
// start once per process and keep run before a test takes the goroutines
// it ignores.
func warmUp(t *testing.T) {
	t.Helper()
	otlp := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(otlp.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
	for try := 1; ; try++ {
		app, err := engine.Start(newPartialStart(t).cfg)
		if stolen(err, "") && try < startTries {
			continue
		}
		require.NoError(t, err)
		app.Close()
		app.Close() // a second Close does nothing
		return
	}
}

// startTries bounds the starts a test makes when another process took one
// of the free addresses it chose.
const startTries = 5

// stolen reports whether Start failed because a listener found its address
// taken, other than want: an address free when the test chose it is free
// only until another process binds it, and on a machine busy with other
// tests one sometimes does. Such a start is tried again on new addresses.
func stolen(err error, want string) bool {
	return errors.Is(err, syscall.EADDRINUSE) && (want == "" || !strings.Contains(err.Error(), want))
}

// TestCloseAfterAPartialStartLeavesNothingRunning fails start-up after
// each of its steps in turn, once the step has started its part: Start
// returns the error, and what had started is closed, each part once: no
// goroutine is left and no listener accepts.
func TestCloseAfterAPartialStartLeavesNothingRunning(t *testing.T) {
	warmUp(t)
	steps := engine.StartSteps()
	require.Contains(t, steps, string(engine.RoleAPI))
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			injected := errors.Newf("injected after %s", step)
			for try := 1; ; try++ {
				p := newPartialStart(t)
				engine.FailStartAfter(&p.cfg, step, injected)
				app, err := engine.Start(p.cfg)
				if stolen(err, "") && try < startTries {
					continue
				}
				require.ErrorIs(t, err, injected)
				require.Nil(t, app)
				p.assertNothingLeft(t)
				return
			}
		})
	}
}

// TestStartFailingAtAListenerClosesWhatStarted takes, in turn, the
// address of each listener the process opens: Start fails at that part,
// with the parts before it started, and closes them all.
func TestStartFailingAtAListenerClosesWhatStarted(t *testing.T) {
	warmUp(t)
	for _, which := range []string{"event store", "kafka", "http api", "metrics"} {
		t.Run(which, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			for try := 1; ; try++ {
				p := newPartialStart(t)
				taken := map[string]string{"event store": p.cfg.EventStoreListen, "kafka": p.cfg.KafkaListen,
					"http api": p.cfg.HTTPListen, "metrics": p.cfg.MetricsListen}[which]
				lis, err := net.Listen("tcp", taken)
				if err != nil && try < startTries {
					continue // taken by another process already
				}
				require.NoError(t, err)
				app, err := engine.Start(p.cfg)
				require.NoError(t, lis.Close())
				if stolen(err, taken) && try < startTries {
					continue
				}
				require.ErrorContains(t, err, taken)
				require.ErrorIs(t, err, syscall.EADDRINUSE)
				require.Nil(t, app)
				p.assertNothingLeft(t)
				return
			}
		})
	}
}
