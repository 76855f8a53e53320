package integration_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// delayService records when each of its paths was called.
type delayService struct {
	mu    sync.Mutex
	calls map[string][]time.Time
}

func (s *delayService) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.calls[r.URL.Path] = append(s.calls[r.URL.Path], time.Now())
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func (s *delayService) called(path string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.calls[path]...)
}

// TestADelayFiresAfterAKillAndRestart: a workflow charges, waits 2 s
// (cool-off), then ships, both HTTP steps run by the built-in HTTP agent.
// Once the task waits (the task view shows cool-off Delayed, with the time
// it waits until), sagad is killed with SIGKILL and started again on the
// same data: the restarted supervisor finds the timer and fires it, the
// task ships once, never before the time it waited until, and the wait is
// recorded once.
func TestADelayFiresAfterAKillAndRestart(t *testing.T) {
	svc := &delayService{calls: map[string][]time.Time{}}
	srv := httptest.NewServer(http.HandlerFunc(svc.serve))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cool-off.yaml"), []byte(`name: cool-off
defaults: {budget: 5s}
steps:
  - {name: charge, http: {url: "`+srv.URL+`/charge/{{ order.orderId }}"}}
  - {name: cool-off, delay: {for: 2s}}
  - {name: ship, http: {url: "`+srv.URL+`/ship/{{ order.orderId }}"}}
`), 0o600))

	bin := buildSagad(t)
	kafka, store := freeAddr(t), freeAddr(t)
	args := []string{"--data", t.TempDir(), "--kafka-listen", kafka, "--eventstore-listen", store, "--workflows", dir,
		"--demo-agents=false", "--supervisor-interval", "100ms"}
	sagad := startRoleProcess(t, bin, "sagad", true, args...)

	c, err := client.New(context.Background(), client.Config{Brokers: []string{kafka}, NoReplyTopic: true})
	require.NoError(t, err)
	require.NoError(t, c.Submit(context.Background(), "cool-1", map[string]any{"workflow": "cool-off"}))
	c.Close()

	view := func(p *roleProcess) *protocol.TaskView {
		code, body := p.get(t, "/api/tasks/cool-1")
		if code != http.StatusOK {
			return nil
		}
		var v protocol.TaskView
		require.NoError(t, json.Unmarshal([]byte(body), &v), body)
		return &v
	}
	var waiting *protocol.TaskView
	require.Eventually(t, func() bool {
		waiting = view(sagad)
		return waiting != nil && len(waiting.Steps) == 3 && waiting.Steps[1].State == domain.StepStateDelayed
	}, time.Minute, 20*time.Millisecond, "the task waits at cool-off")
	require.NotNil(t, waiting.Steps[1].DelayedUntil)
	until := *waiting.Steps[1].DelayedUntil
	assert.Equal(t, domain.StepStateProcessed, waiting.Steps[0].State)
	assert.Equal(t, domain.StepStatePending, waiting.Steps[2].State)
	assert.Equal(t, domain.StateProcessing, waiting.State)
	assert.Empty(t, svc.called("/ship/cool-1"), "nothing ships while the task waits")

	require.NoError(t, sagad.cmd.Process.Kill())
	<-sagad.exited
	killed := time.Now()
	restarted := startRoleProcess(t, bin, "sagad (restarted)", true, args...)

	var done *protocol.TaskView
	require.Eventually(t, func() bool {
		done = view(restarted)
		return done != nil && done.State == domain.StateProcessed
	}, time.Minute, 20*time.Millisecond, "the restarted sagad fires the delay and the task finishes")
	assert.Equal(t, domain.StepStateProcessed, done.Steps[1].State, "a delay that fired counts as succeeded")
	assert.True(t, done.Steps[1].DelayedUntil.Equal(until))
	ships := svc.called("/ship/cool-1")
	require.Len(t, ships, 1, "the task ships once")
	assert.False(t, ships[0].Before(until), "shipped at %s, before the delay's time %s", ships[0], until)
	assert.True(t, ships[0].After(killed), "shipped by the restarted sagad")
	assert.Len(t, svc.called("/charge/cool-1"), 1)

	es, err := eventstore.Dial("esdb://"+store+"?tls=false", testLogger())
	require.NoError(t, err)
	defer es.Close()
	recorded, err := es.ReadStream(context.Background(), domain.TaskStream("cool-1"))
	require.NoError(t, err)
	types := map[string]int{}
	for _, r := range recorded {
		types[r.Type]++
	}
	assert.Equal(t, 1, types[domain.StepDelayedType], "the wait is recorded once: %v", types)
	assert.Equal(t, 1, types[domain.StepDelayElapsedType], "and fired once: %v", types)
}
