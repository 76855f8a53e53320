package projections_test

import (
	"encoding/json"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// history is a compensated order: shipping hung three times, then every
// step was undone in reverse order.
func history() []domain.RecordedEvent {
	type at struct {
		offset time.Duration
		actor  string
		event  domain.Event
	}
	dispatch := func(step, agent string, attempt int, off time.Duration) domain.StepDispatched {
		return domain.StepDispatched{TaskID: "o-1", Step: step, Agent: agent, Attempt: attempt, CompleteBy: t0.Add(off + 5*time.Second),
			LockedBy: "scheduler/a", IdempotencyKey: "o-1/" + step, DispatchedAt: t0.Add(off)}
	}
	timeout := func(attempt int, off time.Duration) domain.StepTimedOut {
		return domain.StepTimedOut{TaskID: "o-1", Step: "schedule-shipping", Attempt: attempt, FailureCount: attempt,
			CompleteBy: t0.Add(off), DetectedBy: "supervisor/b", At: t0.Add(off)}
	}
	compensate := func(step, agent, action string, off time.Duration) domain.CompensationDispatched {
		return domain.CompensationDispatched{TaskID: "o-1", Step: step, Agent: agent, Action: action, Attempt: 1,
			CompleteBy: t0.Add(off + 5*time.Second), LockedBy: "scheduler/a", IdempotencyKey: "o-1/" + step + "/compensation", DispatchedAt: t0.Add(off)}
	}
	steps := []string{"reserve-inventory", "charge-payment", "schedule-shipping"}
	sched, sup := "scheduler/a", "supervisor/b"
	list := []at{
		{0, "submitter/a", domain.TaskSubmitted{TaskID: "o-1", Workflow: "order", Steps: steps, ReplyTo: "shop.replies", Order: json.RawMessage(`{}`), SubmittedAt: t0}},
		{10 * time.Millisecond, sched, dispatch("reserve-inventory", "inventory", 1, 10*time.Millisecond)},
		{30 * time.Millisecond, sched, domain.StepSucceeded{TaskID: "o-1", Step: "reserve-inventory", Attempt: 1, At: t0.Add(30 * time.Millisecond)}},
		{30 * time.Millisecond, sched, dispatch("charge-payment", "payment", 1, 30*time.Millisecond)},
		{50 * time.Millisecond, sched, domain.StepSucceeded{TaskID: "o-1", Step: "charge-payment", Attempt: 1, At: t0.Add(50 * time.Millisecond)}},
		{50 * time.Millisecond, sched, dispatch("schedule-shipping", "shipping", 1, 50*time.Millisecond)},
		{5100 * time.Millisecond, sup, timeout(1, 5050*time.Millisecond)},
		{5100 * time.Millisecond, sup, domain.StepRetryScheduled{TaskID: "o-1", Step: "schedule-shipping", Attempt: 2, NotBefore: t0.Add(5300 * time.Millisecond), At: t0.Add(5100 * time.Millisecond)}},
		{5300 * time.Millisecond, sched, dispatch("schedule-shipping", "shipping", 2, 5300*time.Millisecond)},
		{10400 * time.Millisecond, sup, timeout(2, 10300*time.Millisecond)},
		{10400 * time.Millisecond, sup, domain.StepRetryScheduled{TaskID: "o-1", Step: "schedule-shipping", Attempt: 3, NotBefore: t0.Add(10800 * time.Millisecond), At: t0.Add(10400 * time.Millisecond)}},
		{10800 * time.Millisecond, sched, dispatch("schedule-shipping", "shipping", 3, 10800*time.Millisecond)},
		{15900 * time.Millisecond, sup, timeout(3, 15800*time.Millisecond)},
		{15900 * time.Millisecond, sup, domain.CompensationRequested{TaskID: "o-1", Step: "schedule-shipping", Reason: "step schedule-shipping failed after 3 of 3 attempts: no reply", RequestedBy: sup, At: t0.Add(15900 * time.Millisecond)}},
		{15910 * time.Millisecond, sched, compensate("schedule-shipping", "shipping", "cancel-shipping", 15910*time.Millisecond)},
		{15930 * time.Millisecond, sched, domain.StepCompensated{TaskID: "o-1", Step: "schedule-shipping", Attempt: 1, At: t0.Add(15930 * time.Millisecond)}},
		{15930 * time.Millisecond, sched, compensate("charge-payment", "payment", "refund-payment", 15930*time.Millisecond)},
		{15950 * time.Millisecond, sched, domain.StepCompensated{TaskID: "o-1", Step: "charge-payment", Attempt: 1, At: t0.Add(15950 * time.Millisecond)}},
		{15950 * time.Millisecond, sched, compensate("reserve-inventory", "inventory", "release-inventory", 15950*time.Millisecond)},
		{15970 * time.Millisecond, sched, domain.StepCompensated{TaskID: "o-1", Step: "reserve-inventory", Attempt: 1, At: t0.Add(15970 * time.Millisecond)}},
		{15970 * time.Millisecond, sched, domain.TaskCompensated{TaskID: "o-1", At: t0.Add(15970 * time.Millisecond)}},
	}
	out := make([]domain.RecordedEvent, len(list))
	for i, e := range list {
		data, _ := domain.EncodeEvent(e.event)
		out[i] = domain.RecordedEvent{Stream: "task-o-1", Type: e.event.EventType(), Data: data, Revision: uint64(i),
			Position: uint64(1000 + i), Recorded: t0.Add(e.offset), Metadata: domain.EventMetadata{CorrelationID: "o-1", Actor: e.actor}}
	}
	return out
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./projections -update to create %s", path)
	assert.Equal(t, string(want), string(got))
}

func TestAuditOfACompensatedTask(t *testing.T) {
	a, err := projections.BuildAudit("o-1", history(), projections.Cut{})
	require.NoError(t, err)
	assert.Equal(t, domain.StateCompensated, a.State.State)
	assert.Len(t, a.Rows, 21)
	a.CompareWith(a.State.Clone())
	assert.Empty(t, a.Drift)
}

func TestAuditAtARevisionAndATime(t *testing.T) {
	rev := uint64(9)
	a, err := projections.BuildAudit("o-1", history(), projections.Cut{Revision: &rev})
	require.NoError(t, err)
	assert.Equal(t, domain.StateProcessing, a.State.State)
	assert.Len(t, a.Rows, 10)
	ship := a.State.Step("schedule-shipping")
	assert.Equal(t, domain.StepStateError, ship.State, "just timed out the second time")
	assert.Equal(t, 2, ship.FailureCount)

	at := t0.Add(15900 * time.Millisecond)
	b, err := projections.BuildAudit("o-1", history(), projections.Cut{Time: &at})
	require.NoError(t, err)
	assert.Equal(t, domain.StateCompensating, b.State.State)
	assert.Len(t, b.Rows, 14)
}

func TestAuditJSONAndDrift(t *testing.T) {
	a, err := projections.BuildAudit("o-1", history(), projections.Cut{})
	require.NoError(t, err)
	live := a.State.Clone()
	live.Steps[0].FailureCount = 7
	live.State = domain.StateError
	a.CompareWith(live)
	assert.Equal(t, []string{
		"state: replayed Compensated, live Error",
		"steps[0].failureCount: replayed 0, live 7",
	}, a.Drift)
	out, err := json.MarshalIndent(a, "", "  ")
	require.NoError(t, err)
	golden(t, "audit_drift.json.golden", append(out, '\n'))
}

func TestAuditOfAnUnknownTask(t *testing.T) {
	_, err := projections.BuildAudit("nope", nil, projections.Cut{})
	assert.ErrorIs(t, err, domain.ErrTaskNotFound)
}

// TestEveryEventIsDescribed fails when an event is registered without its
// case in the audit's describe.
func TestEveryEventIsDescribed(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "audit.go", nil, 0)
	require.NoError(t, err)
	described := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if fn, ok := n.(*ast.FuncDecl); ok && fn.Name.Name != "describe" {
			return false
		}
		if cc, ok := n.(*ast.CaseClause); ok {
			for _, expr := range cc.List {
				if sel, ok := expr.(*ast.SelectorExpr); ok {
					described[sel.Sel.Name] = true
				}
			}
		}
		return true
	})
	for _, wire := range domain.TaskEventTypes() {
		e, err := domain.DecodeEvent(wire, []byte(`{}`))
		require.NoError(t, err)
		assert.True(t, described[reflect.TypeOf(e).Name()], "describe has no case for %s", wire)
	}
}
