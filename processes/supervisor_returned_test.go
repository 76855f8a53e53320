package processes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestAGivenBackAttemptIsTimedOutByItsNewDeadline: an attempt given back
// and dispatched again keeps its number with a later complete-by. The
// first dispatch's deadline passing is no error (it used to be logged as
// one at every scan until the new deadline); the new one times it out.
func TestAGivenBackAttemptIsTimedOutByItsNewDeadline(t *testing.T) {
	store := embeddedStore(t)
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := newFakeClock(start)
	wf := oneStep("work", 2*time.Second, domain.CompensateOnExhausted)
	task := domain.NewTask("returned-1")
	var events []domain.Event
	apply := func(more []domain.Event) {
		for _, e := range more {
			task.Apply(e)
		}
		events = append(events, more...)
	}
	apply([]domain.Event{domain.TaskSubmitted{TaskID: task.ID, Workflow: wf.Name, WorkflowVersion: wf.Version, Steps: wf.StepNames(),
		Order: json.RawMessage(`{}`), SubmittedAt: start}})
	apply(task.Next(wf, domain.Decision{Now: start, Actor: "history"}))
	later := domain.Decision{Now: start.Add(time.Second), Actor: "history"}
	more, err := task.RecordReply(wf, domain.Reply{Step: "work", Attempt: 1, Unavailable: true, Reason: "host slow: calls hang"}, later)
	require.NoError(t, err)
	apply(more)
	apply(task.Next(wf, later))
	require.Equal(t, 2, count(func() []string {
		var types []string
		for _, e := range events {
			types = append(types, e.EventType())
		}
		return types
	}(), domain.StepDispatchedType), "dispatched again")
	var batch []domain.NewEvent
	for _, e := range events {
		data, err := domain.EncodeEvent(e)
		require.NoError(t, err)
		batch = append(batch, domain.NewEvent{Type: e.EventType(), Data: data, Metadata: domain.EventMetadata{CorrelationID: task.ID, Actor: "history"}})
	}
	_, err = store.Append(context.Background(), domain.TaskStream(task.ID), domain.ExpectNoStream(), batch...)
	require.NoError(t, err)

	logs := &lockedBuffer{}
	sup := &processes.Supervisor{Store: store, Alerts: &alerts{seen: map[string]int{}}, Workflows: workflows{"work": wf},
		Actor: "supervisor/test", Clock: clock, Logger: slog.New(slog.NewTextHandler(logs, nil)), Interval: 100 * time.Millisecond, Grace: time.Millisecond}
	ready := sup.Ready() // before Run: Run reads the defaults Ready fills in
	run(t, sup.Run)
	<-ready
	// Scan by scan past the first complete-by (start+2s), not the second
	// (start+3s).
	tick := func(n int) {
		for range n {
			require.Eventually(t, func() bool { return clock.Pending() > 0 }, 10*time.Second, time.Millisecond)
			clock.Advance(100 * time.Millisecond)
		}
	}
	tick(25)
	require.Eventually(t, func() bool { return clock.Pending() > 0 }, 10*time.Second, time.Millisecond)
	assert.Zero(t, sup.Stats().Timeouts)
	assert.NotContains(t, logs.String(), "level=ERROR", "the first dispatch's deadline is no error")

	tick(10) // past the second complete-by
	require.Eventually(t, func() bool { return sup.Stats().Timeouts == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, count(eventTypes(t, store, task.ID), domain.StepTimedOutType))
}
