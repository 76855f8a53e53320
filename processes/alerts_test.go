package processes_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// alertLog keeps the alerts sent to it; it refuses the first refuse of
// them, as a broker that is away would.
type alertLog struct {
	mu     sync.Mutex
	refuse int
	sent   []protocol.Alert
}

func (a *alertLog) RaiseAlert(_ context.Context, al protocol.Alert) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.refuse > 0 {
		a.refuse--
		return errors.New("broker away")
	}
	a.sent = append(a.sent, al)
	return nil
}

func (a *alertLog) all() []protocol.Alert {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]protocol.Alert(nil), a.sent...)
}

// TestStatusPublisherResolvesTheAlertOfATaskLeavingError puts a task in
// Error; an operator retries it. The status publisher sends one resolved
// alert for the retry, with its revision and operator, even though the
// first attempt to send it fails (the publisher goes back to its
// checkpoint and sends it again). A cancel of the retried task, which is
// no longer in Error, resolves nothing.
func TestStatusPublisherResolvesTheAlertOfATaskLeavingError(t *testing.T) {
	store := embeddedStore(t)
	clock := newFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	fragile := oneStep("fragile", 2*time.Second, domain.ErrorOnExhausted)
	history{t: t, store: store, now: clock.Now()}.task("failed-1", fragile, true,
		domain.Reply{Attempt: 1, Failure: domain.FailurePermanent, Reason: "refused"})
	failedAt := int64(len(eventTypes(t, store, "failed-1")) - 1)

	alerts := &alertLog{refuse: 1}
	p := &processes.StatusPublisher{Store: store, Checkpoints: store, Sink: &statusSink{}, Alerts: alerts, Logger: quiet(), Name: "status"}
	run(t, p.Run)
	require.Eventually(t, func() bool {
		_, ok, err := store.LoadCheckpoint(context.Background(), "status")
		return err == nil && ok
	}, 10*time.Second, 10*time.Millisecond)
	assert.Empty(t, alerts.all(), "a task in Error resolves nothing")

	op := &processes.Operator{Store: store, Workflows: workflows{"fragile": fragile}, Clock: clock}
	require.NoError(t, op.Retry(context.Background(), "failed-1", "", "ann"))
	require.Eventually(t, func() bool { return len(alerts.all()) == 1 }, 10*time.Second, 10*time.Millisecond)
	got := alerts.all()[0]
	assert.Equal(t, protocol.Alert{TaskID: "failed-1", Workflow: "fragile", State: domain.StateProcessing, Step: "work", Reason: "retried by ann",
		Revision: failedAt + 1, At: clock.Now(), Kind: protocol.AlertResolved, By: "ann"}, got)
	assert.True(t, got.Resolves(protocol.Alert{TaskID: "failed-1", Kind: protocol.AlertRaised, Revision: failedAt}))

	require.NoError(t, op.Cancel(context.Background(), "failed-1", "bob", "no longer wanted"))
	require.Eventually(t, func() bool { return p.Published() >= int64(failedAt)+3 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	assert.Len(t, alerts.all(), 1, "the cancel of a task that is not in Error resolves nothing")
	assert.EqualValues(t, 1, p.Resolved())
}
