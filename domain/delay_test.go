package domain_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

// delayWorkflow is charge, then cool-off (a delay given by delay), then
// ship.
func delayWorkflow(t *testing.T, delay string) *domain.Workflow {
	t.Helper()
	w, err := domain.ParseDefinition([]byte(`{"name":"shop","defaults":{"budget":"5s","attempts":1},"steps":[
		{"name":"charge","agent":"payments","compensation":"refund"},
		{"name":"cool-off","delay":` + delay + `},
		{"name":"ship","agent":"shipping"}]}`))
	require.NoError(t, err)
	return w
}

func TestDelayDefinitionValidation(t *testing.T) {
	for _, tc := range []struct{ step, problem string }{
		{`{"name":"a","delay":{}}`, "steps[0].delay: give exactly one of for"},
		{`{"name":"a","delay":{"for":"1m","until":"{{order.at}}"}}`, "steps[0].delay: give for or until, not both"},
		{`{"name":"a","delay":{"for":"-1m"}}`, "steps[0].delay.for: must be positive"},
		{`{"name":"a","delay":{"until":"{{results.b.at}}"}}`, `steps[0].delay.until: {{results.b.at}}: no step "b" always runs before`},
		{`{"name":"a","delay":{"until":"tomorrow"}}`, `steps[0].delay.until: "tomorrow" is not an RFC 3339 time`},
		{`{"name":"a","delay":{"for":"1m"},"agent":"x"}`, "steps[0].delay: a delay step calls no agent"},
		{`{"name":"a","delay":{"for":"1m"},"compensation":"undo"}`, "steps[0].compensation: a delay step has nothing to undo"},
		{`{"name":"a","delay":{"for":"1m","every":"1h"}}`, "steps[0].delay"},
		{`{"name":"a","delay":"1m"}`, "steps[0].delay: must be an object"},
	} {
		_, err := domain.ParseDefinition([]byte(`{"name":"w","steps":[` + tc.step + `,{"name":"b","agent":"x"}]}`))
		require.Error(t, err, tc.step)
		assert.Contains(t, err.Error(), tc.problem, tc.step)
	}
	for _, ok := range []string{`{"for":"10m"}`, `{"until":"{{ order.at }}"}`, `{"until":"2026-12-01T10:00:00Z"}`, `{"until":"{{results.charge.at}}"}`} {
		w := delayWorkflow(t, ok)
		def, _ := w.Step("cool-off")
		assert.Empty(t, def.Agent, ok)
		assert.Equal(t, []string{"payments", "shipping"}, w.Agents(), "a delay step names no agent")
		doc, err := w.MarshalDefinition()
		require.NoError(t, err)
		again, err := domain.ParseDefinition(doc)
		require.NoError(t, err, string(doc))
		assert.True(t, w.Equal(again), "a delay step survives its JSON document: %s", doc)
		assert.NotContains(t, string(doc), `"agent":""`)
	}
}

func TestDelayWaitsThenFires(t *testing.T) {
	w := delayWorkflow(t, `{"for":"10m"}`)
	g := newGraphTask(t, w, `{"orderId":"o-1"}`)
	events := g.reply("charge", false, "", `{"id":1}`)
	require.Equal(t, []string{"StepSucceeded:charge", "StepDelayed"}, names(events), "the delay starts in the reply's decision")
	delayed := events[1].(domain.StepDelayed)
	assert.Equal(t, t0.Add(10*time.Minute), delayed.Until)

	task := g.task()
	s := task.Step("cool-off")
	assert.Equal(t, domain.StepStateDelayed, s.State)
	require.NotNil(t, s.DelayedUntil)
	assert.Equal(t, t0.Add(10*time.Minute), *s.DelayedUntil)
	assert.Empty(t, task.Next(w, at(time.Hour)), "the scheduler does not fire a delay")
	assert.Equal(t, []domain.DelayedStep{{Step: "cool-off", Until: t0.Add(10 * time.Minute)}}, task.Delays())

	_, err := task.ElapseDelayInTerm("cool-off", delayed.Until, 0, at(10*time.Minute-time.Nanosecond))
	require.ErrorIs(t, err, domain.ErrNotDue, "a timer never fires early")
	_, err = task.ElapseDelayInTerm("cool-off", delayed.Until.Add(time.Second), 0, at(time.Hour))
	require.ErrorIs(t, err, domain.ErrNotDelayed, "a timer for another time is not this delay's")

	fired, err := task.ElapseDelayInTerm("cool-off", delayed.Until, 3, at(10*time.Minute))
	require.NoError(t, err)
	require.Equal(t, []domain.Event{domain.StepDelayElapsed{TaskID: "o-1", Step: "cool-off", Until: delayed.Until,
		FiredBy: "scheduler-1", At: t0.Add(10 * time.Minute), LeaseTerm: 3}}, fired)
	g.events = append(g.events, fired...)
	task = g.task()
	assert.Equal(t, domain.StepStateProcessed, task.Step("cool-off").State, "a delay that fired counts as succeeded")
	assert.Equal(t, int64(3), task.LeaseTerm)
	assert.Equal(t, t0.Add(10*time.Minute), task.UpdatedAt)
	assert.Empty(t, task.Delays())

	_, err = task.ElapseDelayInTerm("cool-off", delayed.Until, 3, at(time.Hour))
	require.ErrorIs(t, err, domain.ErrNotDelayed, "a delay fires once")

	next := task.Next(w, at(10*time.Minute))
	assert.Equal(t, []string{"StepDispatched:ship"}, names(next))
	g.events = append(g.events, next...)
	events = g.reply("ship", false, "", "")
	assert.Equal(t, []string{"StepSucceeded:ship", "TaskProcessed"}, names(events))
}

func TestDelayRefusesAStaleLeaseTerm(t *testing.T) {
	w := delayWorkflow(t, `{"for":"1m"}`)
	g := newGraphTask(t, w, `{}`)
	g.reply("charge", false, "", "")
	g.events = append(g.events, domain.StepTimedOut{TaskID: "o-1", Step: "x", LeaseTerm: 5}) // a newer term acted
	task := g.task()
	_, err := task.ElapseDelayInTerm("cool-off", t0.Add(time.Minute), 4, at(time.Hour))
	require.ErrorIs(t, err, domain.ErrStaleLeaseTerm)
	_, err = task.ElapseDelayInTerm("cool-off", t0.Add(time.Minute), 5, at(time.Hour))
	require.NoError(t, err)
}

func TestDelayUntilFromTheOrder(t *testing.T) {
	w := delayWorkflow(t, `{"until":"{{ order.at }}"}`)

	g := newGraphTask(t, w, `{"at":"2026-11-21T12:30:00+02:00"}`)
	events := g.reply("charge", false, "", "")
	require.Equal(t, []string{"StepSucceeded:charge", "StepDelayed"}, names(events))
	assert.True(t, events[1].(domain.StepDelayed).Until.Equal(t0.Add(30*time.Minute)))

	// A time past fires at once, still recorded, and the task goes on in
	// the same decision.
	g = newGraphTask(t, w, `{"at":"2026-11-21T09:00:00Z"}`)
	events = g.reply("charge", false, "", "")
	require.Equal(t, []string{"StepSucceeded:charge", "StepDelayed", "StepDelayElapsed", "StepDispatched:ship"}, names(events))
	assert.Equal(t, domain.StepDelayElapsed{TaskID: "o-1", Step: "cool-off", Until: t0.Add(-time.Hour), FiredBy: "scheduler-1", At: t0}, events[2])

	// A template that gives no time fails the step for good: the task
	// compensates what it did.
	for _, order := range []string{`{"at":"soon"}`, `{}`, `{"at":12}`} {
		g = newGraphTask(t, w, order)
		events = g.reply("charge", false, "", "")
		require.Equal(t, []string{"StepSucceeded:charge", "StepFailed:cool-off", "CompensationRequested", "CompensationDispatched:charge"}, names(events), order)
		failed := events[1].(domain.StepFailed)
		assert.Equal(t, domain.FailurePermanent, failed.Failure)
		assert.True(t, strings.HasPrefix(failed.Reason, "delay until {{ order.at }}: "), failed.Reason)
		task := g.task()
		assert.Equal(t, "cool-off", task.FailedStep, order)
	}
}

func TestDelayIsNeverCompensated(t *testing.T) {
	w, err := domain.ParseDefinition([]byte(`{"name":"shop","defaults":{"budget":"5s","attempts":1},"steps":[
		{"name":"charge","agent":"payments","compensation":"refund"},
		{"name":"cool-off","delay":{"for":"1m"}},
		{"name":"ship","agent":"shipping","compensation":"unship"}]}`))
	require.NoError(t, err)
	g := newGraphTask(t, w, `{}`)
	g.reply("charge", false, "", "")
	fired, err := g.task().ElapseDelayInTerm("cool-off", t0.Add(time.Minute), 0, at(time.Minute))
	require.NoError(t, err)
	g.events = append(g.events, fired...)
	g.events = append(g.events, g.task().Next(w, d)...)
	events := g.reply("ship", false, domain.FailurePermanent, "")
	assert.Equal(t, []string{"StepFailed:ship", "CompensationRequested", "CompensationDispatched:charge"}, names(events),
		"the delay between is passed over: there is nothing to undo")
	events = g.reply("charge", true, "", "")
	assert.Equal(t, []string{"StepCompensated:charge", "TaskCompensated"}, names(events))
}

func TestDelayBesideAFailingBranchIsAbandoned(t *testing.T) {
	w, err := domain.ParseDefinition([]byte(`{"name":"w","defaults":{"budget":"5s","attempts":1},"steps":[
		{"name":"wait","delay":{"for":"1h"},"after":[]},
		{"name":"pay","agent":"payments","after":[]}]}`))
	require.NoError(t, err)
	g := newGraphTask(t, w, `{}`)
	require.Equal(t, []string{"StepDelayed", "StepDispatched:pay"}, names(g.events[1:]))
	assert.Equal(t, domain.StateProcessing, g.task().State)
	events := g.reply("pay", false, domain.FailurePermanent, "")
	assert.Equal(t, []string{"StepFailed:pay", "CompensationRequested", "TaskCompensated"}, names(events), "a waiting delay holds nothing up")
	wait := g.task().Step("wait")
	assert.Equal(t, domain.StepStatePending, wait.State, "an abandoned delay no longer waits")
	assert.Empty(t, g.task().Delays())
	_, err = g.task().ElapseDelayInTerm("wait", t0.Add(time.Hour), 0, at(time.Hour))
	require.ErrorIs(t, err, domain.ErrNotDelayed)
}

// TestDelayEventsRoundTrip: the new events decode as they encode, and a
// stream without them folds as before.
func TestDelayEventsRoundTrip(t *testing.T) {
	for _, e := range []domain.Event{
		domain.StepDelayed{TaskID: "o-1", Step: "s", Until: t0, At: t0},
		domain.StepDelayElapsed{TaskID: "o-1", Step: "s", Until: t0, FiredBy: "sup", At: t0, LeaseTerm: 2},
	} {
		b, err := domain.EncodeEvent(e)
		require.NoError(t, err)
		back, err := domain.DecodeEvent(e.EventType(), b)
		require.NoError(t, err)
		assert.Equal(t, e, back)
	}
	b, _ := json.Marshal(domain.StepDelayElapsed{TaskID: "o-1", Step: "s", Until: t0, At: t0})
	assert.NotContains(t, string(b), "leaseTerm")
	assert.NotContains(t, string(b), "firedBy")
}

// TestCancellingADelayedTaskUndoesWhatItDid: an operator cancels a task
// waiting at its cool-off; it compensates the charge and the delay never
// fires.
func TestCancellingADelayedTaskUndoesWhatItDid(t *testing.T) {
	w := delayWorkflow(t, `{"for":"10m"}`)
	g := newGraphTask(t, w, `{}`)
	g.reply("charge", false, "", "")
	cancelled, err := g.task().Cancel(w, "ops", "customer changed their mind", at(time.Minute))
	require.NoError(t, err)
	g.events = append(g.events, cancelled...)
	next := g.task().Next(w, at(time.Minute))
	assert.Equal(t, []string{"CompensationDispatched:charge"}, names(next))
	g.events = append(g.events, next...)
	_, err = g.task().ElapseDelayInTerm("cool-off", t0.Add(10*time.Minute), 0, at(time.Hour))
	require.ErrorIs(t, err, domain.ErrNotDelayed)
	assert.Equal(t, []string{"StepCompensated:charge", "TaskCompensated"}, names(g.reply("charge", true, "", "")))
}
