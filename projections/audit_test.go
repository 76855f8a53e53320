package projections_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/projections"
	"github.com/sagaengine/saga/projections/audittest"
)

var t0 = audittest.T0

func TestAuditOfACompensatedTask(t *testing.T) {
	a, err := projections.BuildAudit("o-1", audittest.History(), projections.Cut{})
	require.NoError(t, err)
	assert.Equal(t, domain.StateCompensated, a.State.State)
	assert.Len(t, a.Rows, 21)
	a.CompareWith(protocol.ViewOf(a.State.Task()))
	assert.Empty(t, a.Drift)
}

func TestAuditAtARevisionAndATime(t *testing.T) {
	rev := uint64(9)
	a, err := projections.BuildAudit("o-1", audittest.History(), projections.Cut{Revision: &rev})
	require.NoError(t, err)
	assert.Equal(t, domain.StateProcessing, a.State.State)
	assert.Len(t, a.Rows, 10)
	ship := a.State.Task().Step("schedule-shipping")
	assert.Equal(t, domain.StepStateError, ship.State, "just timed out the second time")
	assert.Equal(t, 2, ship.FailureCount)

	at := t0.Add(15900 * time.Millisecond)
	b, err := projections.BuildAudit("o-1", audittest.History(), projections.Cut{Time: &at})
	require.NoError(t, err)
	assert.Equal(t, domain.StateCompensating, b.State.State)
	assert.Len(t, b.Rows, 14)
}

func TestAuditJSONAndDrift(t *testing.T) {
	a, err := projections.BuildAudit("o-1", audittest.History(), projections.Cut{})
	require.NoError(t, err)
	live := protocol.ViewOf(a.State.Task())
	live.Steps[0].FailureCount = 7
	live.State = domain.StateError
	a.CompareWith(live)
	assert.Equal(t, []string{
		"state: replayed Compensated, live Error",
		"steps[0].failureCount: replayed 0, live 7",
	}, a.Drift)
	out, err := json.MarshalIndent(a, "", "  ")
	require.NoError(t, err)
	audittest.Golden(t, "audit_drift.json.golden", append(out, '\n'))
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

// TestAuditShowsTheCompensationsIdempotencyKey: a compensation's dispatch
// names its idempotency key, as a step's does, so that an operator can
// match it to the service's log.
func TestAuditShowsTheCompensationsIdempotencyKey(t *testing.T) {
	a, err := projections.BuildAudit("o-1", audittest.History(), projections.Cut{})
	require.NoError(t, err)
	seen := 0
	for _, r := range a.Rows {
		if r.Event == domain.CompensationDispatchedType {
			seen++
			assert.Contains(t, r.Details, "key "+domain.CompensationKey("o-1", r.Step))
		}
	}
	assert.Positive(t, seen)
}
