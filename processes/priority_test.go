package processes_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// orderingAgent records the tasks and priorities of the commands sent, in
// order, and answers them.
type orderingAgent struct {
	agent
	mu   sync.Mutex
	sent []protocol.ExecuteStep
}

func (a *orderingAgent) SendCommand(ctx context.Context, cmd protocol.ExecuteStep) error {
	a.mu.Lock()
	a.sent = append(a.sent, cmd)
	a.mu.Unlock()
	return a.agent.SendCommand(ctx, cmd)
}

// TestRetriesDueTogetherAreReleasedHighFirst writes a low, a normal and a
// high task, in that order, whose retries fall due at the same moment: the
// scheduler sends the high retry first and the low one last, each command
// carrying its task's priority (none for normal).
func TestRetriesDueTogetherAreReleasedHighFirst(t *testing.T) {
	store := embeddedStore(t)
	clock := newFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	wf := oneStep("work", 2*time.Second, domain.CompensateOnExhausted)
	for id, p := range map[string]domain.Priority{"p-low": domain.PriorityLow, "p-normal": "", "p-high": domain.PriorityHigh} {
		h := history{t: t, store: store, now: clock.Now(), priority: p}
		h.task(id, wf, true, domain.Reply{Attempt: 1, Failure: domain.FailureTransient, Reason: "flaky"})
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &orderingAgent{agent: agent{hung: func(protocol.ExecuteStep) bool { return false }, ctx: ctx}}
	s := &processes.Scheduler{Store: store, Commands: rec, DeadLetters: dropLetters{}, Workflows: workflows{"work": wf},
		Actor: "scheduler/test", Clock: clock, Logger: quiet(), Shards: 1}
	rec.scheduler = s
	run(t, s.Run)
	<-s.Ready()
	clock.Advance(2 * time.Second) // past every retry's notBefore at once

	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.sent) == 3
	}, 10*time.Second, 10*time.Millisecond)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var order []string
	for _, c := range rec.sent {
		order = append(order, c.TaskID+":"+string(c.Priority))
	}
	assert.Equal(t, []string{"p-high:high", "p-normal:", "p-low:low"}, order)
}
