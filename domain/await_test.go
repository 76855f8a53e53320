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

// awaitWorkflow charges a payment, then waits for the payment provider's
// event on the application's own topic.
func awaitWorkflow(t *testing.T, extra string) *domain.Workflow {
	t.Helper()
	w, err := domain.ParseDefinition([]byte(`{"name":"pay","steps":[
		{"name":"charge","agent":"payments","compensation":"refund"},
		{"name":"captured","budget":"15m"` + extra + `,"await":{"topic":"shop.payments","typeField":"/type","correlate":"/orderId",
		  "value":"{{ order.orderId }}","succeedOn":["PaymentCaptured"],"failOn":["PaymentDeclined"]}},
		{"name":"ship","agent":"shipping"}]}`))
	require.NoError(t, err)
	return w
}

// awaitingTask is a task of awaitWorkflow whose captured step waits.
func awaitingTask(t *testing.T, wf *domain.Workflow) *graphTask {
	t.Helper()
	g := newGraphTask(t, wf, `{"orderId":"A-17"}`)
	events := g.reply("charge", false, "", `{"charge":"c-1"}`)
	require.Equal(t, []string{"StepSucceeded:charge", "StepAwaiting"}, names(events))
	return g
}

func TestAwaitDefinition(t *testing.T) {
	wf := awaitWorkflow(t, "")
	def, ok := wf.Step("captured")
	require.True(t, ok)
	assert.Empty(t, def.Agent, "an await calls no agent")
	assert.Equal(t, 1, def.MaxAttempts, "an await waits once")
	assert.Equal(t, 15*time.Minute, def.Budget)
	assert.Equal(t, []string{"shop.payments"}, wf.AwaitTopics())
	assert.Equal(t, []string{"payments", "shipping"}, wf.Agents(), "no command topic for the await")

	// The definition encodes and reads back the same.
	doc, err := wf.MarshalDefinition()
	require.NoError(t, err)
	again, err := domain.ParseDefinition(doc)
	require.NoError(t, err)
	assert.True(t, wf.Equal(again), string(doc))
	assert.NotContains(t, string(doc), `"agent":""`)

	// A Go value takes the same defaults.
	goWf := (&domain.Workflow{Name: "pay", Steps: []domain.StepDefinition{{Name: "captured", Budget: time.Minute,
		Await: &domain.AwaitDefinition{Topic: "shop.payments", Correlate: "/orderId", Value: "{{order.orderId}}", SucceedOn: []string{"Captured"}}}}}).WithDefaults()
	require.NoError(t, goWf.Validate())
	assert.Equal(t, 1, goWf.Steps[0].MaxAttempts)
}

func TestAwaitValidation(t *testing.T) {
	for name, tc := range map[string]struct{ step, want string }{
		"no topic":        {`"await":{"correlate":"/id","value":"{{order.id}}","succeedOn":["A"]}`, "steps[0].await.topic: is required"},
		"saga's topic":    {`"await":{"topic":"saga.replies","correlate":"/id","value":"{{order.id}}","succeedOn":["A"]}`, "one of saga's own topics"},
		"bad pointer":     {`"await":{"topic":"t","correlate":"id","value":"{{order.id}}","succeedOn":["A"]}`, "steps[0].await.correlate: \"id\" is not a JSON pointer"},
		"bad typeField":   {`"await":{"topic":"t","typeField":"type","correlate":"/id","value":"{{order.id}}","succeedOn":["A"]}`, "await.typeField"},
		"constant value":  {`"await":{"topic":"t","correlate":"/id","value":"always","succeedOn":["A"]}`, "names nothing of the order"},
		"bad template":    {`"await":{"topic":"t","correlate":"/id","value":"{{results.later.id}}","succeedOn":["A"]}`, "steps[0].await.value"},
		"no succeedOn":    {`"await":{"topic":"t","correlate":"/id","value":"{{order.id}}"}`, "await.succeedOn: name at least one"},
		"type twice":      {`"await":{"topic":"t","correlate":"/id","value":"{{order.id}}","succeedOn":["A"],"failOn":["A"]}`, "await.failOn[0]: type \"A\" is also in succeedOn"},
		"with an agent":   {`"agent":"x","await":{"topic":"t","correlate":"/id","value":"{{order.id}}","succeedOn":["A"]}`, "steps[0].agent: an await step"},
		"compensation":    {`"compensation":"undo","await":{"topic":"t","correlate":"/id","value":"{{order.id}}","succeedOn":["A"]}`, "steps[0].compensation: an await step"},
		"attempts":        {`"attempts":3,"await":{"topic":"t","correlate":"/id","value":"{{order.id}}","succeedOn":["A"]}`, "steps[0].attempts: an await step waits once"},
		"unknown field":   {`"await":{"topic":"t","correlate":"/id","value":"{{order.id}}","succeedOn":["A"],"timeout":"1m"}`, "await.timeout: unknown field"},
		"not an object":   {`"await":"t"`, "steps[0].await: must be an object"},
		"and a delay":     {`"delay":{"for":"1m"},"await":{"topic":"t","correlate":"/id","value":"{{order.id}}","succeedOn":["A"]}`, "give await or delay, not both"},
		"secret in value": {`"await":{"topic":"t","correlate":"/id","value":"{{secret.KEY}}","succeedOn":["A"]}`, "steps[0].await.value"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := domain.ParseDefinition([]byte(`{"name":"w","steps":[{"name":"later-wait",` + tc.step + `},{"name":"later","agent":"a"}]}`))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestAwaitingStepWaitsUntilItsBudget(t *testing.T) {
	wf := awaitWorkflow(t, "")
	g := awaitingTask(t, wf)
	e := g.events[len(g.events)-1].(domain.StepAwaiting)
	assert.Equal(t, domain.StepAwaiting{TaskID: "o-1", Step: "captured", Attempt: 1, Topic: "shop.payments", Value: "A-17",
		Until: t0.Add(15 * time.Minute), At: t0}, e)

	task := g.task()
	s := task.Step("captured")
	assert.Equal(t, domain.StepStateAwaiting, s.State, "not Pending")
	assert.Equal(t, &domain.AwaitingFor{Topic: "shop.payments", Value: "A-17", Until: t0.Add(15 * time.Minute)}, s.Awaiting)
	assert.Empty(t, task.InFlight(), "an await is no attempt at an agent: nothing to resend, no room taken")
	assert.Equal(t, []domain.InFlightAttempt{{Step: "captured", Attempt: 1, CompleteBy: t0.Add(15 * time.Minute)}}, task.Awaits())
	assert.Empty(t, task.Next(wf, d), "the task waits for the event")
	assert.Equal(t, t0.Add(15*time.Minute), *s.CompleteBy, "the deadline, as an attempt's")
}

func TestMatchingEventCompletesTheAwait(t *testing.T) {
	wf := awaitWorkflow(t, "")
	g := awaitingTask(t, wf)
	body := json.RawMessage(`{"type":"PaymentCaptured","orderId":"A-17","amount":12}`)

	_, err := g.task().Correlate(wf, domain.AwaitedEvent{Topic: "shop.payments", Type: "PaymentCaptured", Value: "A-18", Body: body}, d)
	assert.ErrorIs(t, err, domain.ErrNotAwaiting, "another order's event")
	_, err = g.task().Correlate(wf, domain.AwaitedEvent{Topic: "shop.payments", Type: "PaymentRefunded", Value: "A-17", Body: body}, d)
	assert.ErrorIs(t, err, domain.ErrNotAwaiting, "a type neither succeedOn nor failOn")
	_, err = g.task().Correlate(wf, domain.AwaitedEvent{Topic: "shop.orders", Type: "PaymentCaptured", Value: "A-17", Body: body}, d)
	assert.ErrorIs(t, err, domain.ErrNotAwaiting, "another topic")

	events, err := g.task().Correlate(wf, domain.AwaitedEvent{Topic: "shop.payments", Type: "PaymentCaptured", Value: "A-17", Body: body}, d)
	require.NoError(t, err)
	assert.Equal(t, []string{"StepSucceeded:captured", "StepDispatched:ship"}, names(events), "what follows goes in the same decision")
	g.events = append(g.events, events...)
	task := g.task()
	assert.Equal(t, domain.StepStateProcessed, task.Step("captured").State)
	assert.JSONEq(t, string(body), string(task.Step("captured").Result))
	assert.Contains(t, task.ResultsFor(wf, "ship"), "captured", "later steps read results.captured")
	assert.Nil(t, task.Step("captured").Awaiting)

	_, err = task.Correlate(wf, domain.AwaitedEvent{Topic: "shop.payments", Type: "PaymentCaptured", Value: "A-17", Body: body}, d)
	assert.ErrorIs(t, err, domain.ErrNotAwaiting, "one event completes the step once")
}

func TestFailOnEventCompensates(t *testing.T) {
	wf := awaitWorkflow(t, "")
	g := awaitingTask(t, wf)
	events, err := g.task().Correlate(wf, domain.AwaitedEvent{Topic: "shop.payments", Type: "PaymentDeclined", Value: "A-17", Body: json.RawMessage(`{}`)}, d)
	require.NoError(t, err)
	assert.Equal(t, []string{"StepFailed:captured", "CompensationRequested", "CompensationDispatched:charge"}, names(events))
	assert.Equal(t, domain.FailurePermanent, events[0].(domain.StepFailed).Failure)
}

func TestAwaitTimesOutAtItsBudget(t *testing.T) {
	wf := awaitWorkflow(t, "")
	g := awaitingTask(t, wf)
	_, err := g.task().TimeOut(wf, "captured", false, 1, at(15*time.Minute-time.Millisecond))
	assert.ErrorIs(t, err, domain.ErrNotDue)
	events, err := g.task().TimeOut(wf, "captured", false, 1, at(15*time.Minute))
	require.NoError(t, err)
	assert.Equal(t, []string{"StepTimedOut", "CompensationRequested"}, names(events), "no retry: onExhausted applies")

	// With onExhausted: error, the task stops for an operator.
	wf = awaitWorkflow(t, `,"onExhausted":"error"`)
	g = awaitingTask(t, wf)
	events, err = g.task().TimeOut(wf, "captured", false, 1, at(15*time.Minute))
	require.NoError(t, err)
	assert.Equal(t, []string{"StepTimedOut", "TaskFailed"}, names(events))
}

func TestCompensationAbandonsTheAwait(t *testing.T) {
	w, err := domain.ParseDefinition([]byte(`{"name":"pay","steps":[
		{"name":"captured","after":[],"await":{"topic":"shop.payments","correlate":"/orderId","value":"{{ order.orderId }}","succeedOn":["PaymentCaptured"]}},
		{"name":"charge","after":[],"agent":"payments","compensation":"refund","attempts":1}]}`))
	require.NoError(t, err)
	g := newGraphTask(t, w, `{"orderId":"A-17"}`)
	assert.Equal(t, []string{"StepAwaiting", "StepDispatched:charge"}, names(g.events[1:]))
	events := g.reply("charge", false, domain.FailurePermanent, "")
	assert.Equal(t, []string{"StepFailed:charge", "CompensationRequested", "TaskCompensated"}, names(events),
		"the waiting branch neither holds the compensation up nor is compensated")
	task := g.task()
	assert.NotEqual(t, domain.StepStateAwaiting, task.Step("captured").State)
	_, err = task.Correlate(w, domain.AwaitedEvent{Topic: "shop.payments", Type: "PaymentCaptured", Value: "A-17"}, d)
	assert.ErrorIs(t, err, domain.ErrNotAwaiting)
}

func TestAwaitValueMissingStopsTheTask(t *testing.T) {
	wf := awaitWorkflow(t, "")
	g := newGraphTask(t, wf, `{"other":1}`)
	events := g.reply("charge", false, "", `{}`)
	require.Len(t, events, 2)
	failed, ok := events[1].(domain.TaskFailed)
	require.True(t, ok, names(events))
	assert.True(t, strings.HasPrefix(failed.Reason, "await value of step captured"), failed.Reason)
}

func TestAwaitReadsTypeAndValue(t *testing.T) {
	a := &domain.AwaitDefinition{Topic: "t", TypeField: "/type", Correlate: "/order/id"}
	typ, value, ok := a.Read([]byte(`{"type":"Captured","order":{"id":17}}`), "ignored", 0)
	assert.True(t, ok)
	assert.Equal(t, "Captured", typ)
	assert.Equal(t, "17", value)
	_, _, ok = a.Read([]byte(`{"type":"Captured"}`), "", 0)
	assert.False(t, ok, "no correlation value")
	_, _, ok = a.Read([]byte(`not json`), "", 0)
	assert.False(t, ok)
	a.TypeField = ""
	typ, _, ok = a.Read([]byte(`{"order":{"id":"x"}}`), "Captured", 0)
	assert.True(t, ok)
	assert.Equal(t, "Captured", typ, "the CloudEvents type when there is no typeField")
}
