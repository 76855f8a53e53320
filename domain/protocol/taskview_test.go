package protocol_test

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// exampleTask has every field of a task set, in every kind of step.
func exampleTask() *domain.Task {
	at := time.Date(2026, 11, 21, 10, 0, 0, 5, time.UTC)
	later := at.Add(time.Second)
	return &domain.Task{ID: "o-1", Workflow: "order", WorkflowVersion: 2, State: domain.StateCompensating, ReplyTo: "reply.shop",
		Order: json.RawMessage(`{"orderId":"o-1"}`), Reason: "cancelled by ops", FailedStep: "ship", Compensating: true, CancelledBy: "ops",
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Revision: 9, SubmittedAt: at, UpdatedAt: later,
		Steps: []*domain.Step{
			{Name: "reserve", Agent: "inventory", Leg: domain.Leg{State: domain.StepStateCompensating, Attempt: 2, LockedBy: "s-1", FailureCount: 1,
				LastFailure: domain.FailureTimeout, LastError: "late", IdempotencyKey: "o-1/reserve", AttemptBase: 1},
				Result: json.RawMessage(`{"r":1}`),
				Compensation: &domain.Leg{State: domain.StepStateRetrying, Attempt: 1, NotBefore: &later, FailureCount: 1, LastFailure: domain.FailureTransient,
					LastError: "busy", IdempotencyKey: "o-1/reserve/compensation"}},
			{Name: "ship", Leg: domain.Leg{State: domain.StepStateProcessing, Attempt: 1, LockedBy: "s-2", CompleteBy: &later, IdempotencyKey: "o-1/ship"}},
			{Name: "mail", Leg: domain.Leg{State: domain.StepStatePending}},
		}}
}

// TestTaskViewKeepsTheJSONOfBefore: the API served domain.Task as it was
// until the view had a type of its own; testdata holds what that build
// served (and stored in its task view files) for exampleTask. The view's
// JSON is the same, byte for byte, and the old JSON decodes into the view.
func TestTaskViewKeepsTheJSONOfBefore(t *testing.T) {
	before, err := os.ReadFile("testdata/task-before-view-types.json")
	require.NoError(t, err)
	got, err := json.Marshal(protocol.ViewOf(exampleTask()))
	require.NoError(t, err)
	assert.Equal(t, string(before[:len(before)-1]), string(got))

	var v protocol.TaskView
	require.NoError(t, json.Unmarshal(before, &v))
	assert.Equal(t, protocol.ViewOf(exampleTask()), &v)

	empty, err := json.Marshal(protocol.ViewOf(domain.NewTask("empty")))
	require.NoError(t, err)
	assert.JSONEq(t, `{"id":"empty","workflow":"","workflowVersion":0,"state":"","steps":null,"revision":-1,`+
		`"submittedAt":"0001-01-01T00:00:00Z","updatedAt":"0001-01-01T00:00:00Z"}`, string(empty))
}

// fill sets every field reachable from v (structs, pointers, slices of
// one element) to a value that is not the zero one.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			fill(v.Field(i))
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			v.Set(reflect.ValueOf(json.RawMessage(`{"x":1}`)).Convert(v.Type()))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Bool:
		v.SetBool(true)
	default:
		panic("fill: add " + v.Kind().String())
	}
}

// TestTaskViewCarriesEveryFieldOfATask fails when a field is added to
// domain.Task, Step or Leg and not to the view: the task view folds events
// into the state its rows give back (TaskView.Task), so a field the view
// drops would be lost at its next event. Only the order's body is left out.
func TestTaskViewCarriesEveryFieldOfATask(t *testing.T) {
	var full domain.Task
	fill(reflect.ValueOf(&full).Elem())
	back := protocol.ViewOf(&full).Task()
	full.Order = nil
	assert.Equal(t, &full, back)

	var view protocol.TaskView
	fill(reflect.ValueOf(&view).Elem())
	view.Steps[0].ResultBytes = 0 // only a Summary, which a list shows, sets it
	assert.Equal(t, &view, protocol.ViewOf(view.Task()), "and every field of the view comes from the task")
}

// TestSummaryLeavesResultsOut: a list shows tasks without their steps'
// results, only their sizes, and the task it summarises keeps them.
func TestSummaryLeavesResultsOut(t *testing.T) {
	var view protocol.TaskView
	fill(reflect.ValueOf(&view).Elem())
	view.Steps[0].ResultBytes = 0
	summary := view.Summary()
	assert.Nil(t, summary.Steps[0].Result)
	assert.Equal(t, len(`{"x":1}`), summary.Steps[0].ResultBytes)
	assert.JSONEq(t, `{"x":1}`, string(view.Steps[0].Result), "the task keeps its result")
	assert.Zero(t, view.Steps[0].ResultBytes)
	summary.Steps[0].Result = view.Steps[0].Result
	summary.Steps[0].ResultBytes = 0
	assert.Equal(t, &view, summary, "and nothing else changes")
}
