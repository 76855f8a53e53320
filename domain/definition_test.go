package domain_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

// orderWorkflow is the shape of the demo workflow, built in Go so that the
// domain's tests do not depend on the demo's definition file.
func orderWorkflow() *domain.Workflow {
	step := func(name, agent, compensation string) domain.StepDefinition {
		return domain.StepDefinition{Name: name, Agent: agent, Budget: 5 * time.Second, MaxAttempts: 3, Backoff: domain.DefaultBackoff,
			OnExhausted:  domain.CompensateOnExhausted,
			Compensation: &domain.CompensationDefinition{Action: compensation, Budget: 5 * time.Second, MaxAttempts: 5, Backoff: domain.DefaultBackoff}}
	}
	return &domain.Workflow{Name: domain.DefaultWorkflow, Steps: []domain.StepDefinition{
		step("reserve-inventory", "inventory", "release-inventory"),
		step("charge-payment", "payment", "refund-payment"),
		step("schedule-shipping", "shipping", "cancel-shipping"),
	}}
}

func TestMinimalDefinitionTakesDefaults(t *testing.T) {
	w, err := domain.ParseDefinition([]byte(`{"name":"signup","steps":[
		{"name":"create-account","agent":"accounts","compensation":"delete-account"},
		{"name":"send-welcome","http":{"url":"http://mail.local/send"}}]}`))
	require.NoError(t, err)
	first, second := w.Steps[0], w.Steps[1]
	assert.Equal(t, domain.DefaultStepBudget, first.Budget)
	assert.Equal(t, domain.DefaultStepAttempts, first.MaxAttempts)
	assert.Equal(t, domain.DefaultBackoff, first.Backoff)
	assert.Equal(t, domain.CompensateOnExhausted, first.OnExhausted)
	require.NotNil(t, first.Compensation)
	assert.Equal(t, "delete-account", first.Compensation.Action)
	assert.Equal(t, first.Budget, first.Compensation.Budget)
	assert.Equal(t, domain.HTTPAgent, second.Agent)
	assert.Equal(t, "POST", second.HTTP.Method)
	assert.Nil(t, second.Compensation, "a step may have no compensation")
	assert.Equal(t, []string{"orders"}, w.Trigger.TopicsOrDefault())
}

func TestDefinitionRoundTrips(t *testing.T) {
	w, err := domain.ParseDefinition([]byte(`{"name":"pay","trigger":{"topics":["shop.orders"],"type":"OrderPlaced","idField":"/order/id"},
		"defaults":{"budget":"2s","attempts":4},
		"steps":[{"name":"charge","http":{"method":"post","url":"http://pay/charge/{{order.order.id}}","headers":{"X-Amount":"{{order.amount}}"},
		"body":{"amount":"{{order.amount}}"},"transientStatus":[409]},
		"compensation":{"http":{"url":"http://pay/refund","body":{"paymentId":"{{result.paymentId}}"}},"attempts":7}}]}`))
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, w.Steps[0].Budget)
	assert.Equal(t, 7, w.Steps[0].Compensation.MaxAttempts)
	data, err := w.MarshalDefinition()
	require.NoError(t, err)
	again, err := domain.ParseDefinition(data)
	require.NoError(t, err)
	assert.True(t, w.Equal(again), "%s", data)
}

func TestInvalidDefinitionListsEveryProblem(t *testing.T) {
	_, err := domain.ParseDefinition([]byte(`{"name":"bad name","colour":"red","steps":[
		{"name":"a","agent":"x","budget":"-1s","attempts":0},
		{"name":"a","agent":"y","onExhausted":"panic"},
		{"name":"c"},
		{"name":"d","http":{"url":"http://svc/{{results.zzz.id}}","method":"FETCH","body":{"x":"{{nope}}"}}},
		{"name":"e","http":{"url":"http://svc/{{result.id}}"}}]}`))
	require.ErrorIs(t, err, domain.ErrInvalidWorkflow)
	got := map[string]bool{}
	for _, p := range domain.ProblemsOf(err) {
		got[p.Path] = true
	}
	for _, path := range []string{"colour", "name", "steps[0].budget", "steps[0].attempts", "steps[1].name", "steps[1].onExhausted",
		"steps[2].agent", "steps[3].http.url", "steps[3].http.method", "steps[3].http.body", "steps[4].http.url"} {
		assert.True(t, got[path], "no problem reported at %s in:\n%v", path, err)
	}
}

func TestStructuralProblemsAreReportedTogether(t *testing.T) {
	_, err := domain.ParseDefinition([]byte(`{"name":"w","steps":[{"name":"a","agent":"x","budget":5,"attempts":"3","retries":2}]}`))
	require.Error(t, err)
	assert.Len(t, domain.ProblemsOf(err), 3, "%v", err)
}

func TestTemplatesRender(t *testing.T) {
	data := domain.TemplateData{TaskID: "o-1", Workflow: "pay", Version: 2, Step: "refund", Attempt: 1, IdempotencyKey: "o-1/charge",
		Order:   json.RawMessage(`{"order":{"id":"o 1/x"},"amount":12.5,"items":[{"sku":"A"}]}`),
		Results: map[string]json.RawMessage{"charge": json.RawMessage(`{"paymentId":"p-9"}`)},
		Result:  json.RawMessage(`{"paymentId":"p-9"}`)}
	url, err := domain.RenderText("http://pay/{{order.order.id}}?sku={{ order.items.0.sku }}&v={{task.version}}", data, domain.EscapeURLValue)
	require.NoError(t, err)
	assert.Equal(t, "http://pay/o%201%2Fx?sku=A&v=2", url)
	body, err := domain.RenderJSON(json.RawMessage(`{"amount":"{{order.amount}}","payment":"{{results.charge}}","note":"refund {{result.paymentId}}"}`), data)
	require.NoError(t, err)
	assert.JSONEq(t, `{"amount":12.5,"payment":{"paymentId":"p-9"},"note":"refund p-9"}`, string(body))
	_, err = domain.RenderText("{{order.missing}}", data, nil)
	assert.ErrorIs(t, err, domain.ErrTemplate)
}

func TestTriggerReadsApplicationEvents(t *testing.T) {
	w := &domain.Workflow{Name: "ship", Version: 3, Trigger: domain.Trigger{Topics: []string{"shop.orders"}, Type: "OrderPlaced",
		TypeField: "/type", IDField: "/order/id", ReplyToField: "/meta/reply"}}
	doc, err := domain.ParseOrderDocument([]byte(`{"type":"OrderPlaced","order":{"id":"A-17"},"meta":{"reply":"reply.shop"}}`), 0)
	require.NoError(t, err)
	assert.True(t, doc.Matches(w.Trigger, "shop.orders", ""))
	assert.False(t, doc.Matches(w.Trigger, "orders", ""))
	o, err := doc.Order(w, "")
	require.NoError(t, err)
	assert.Equal(t, domain.Order{ID: "A-17", Workflow: "ship", WorkflowVersion: 3, ReplyTo: "reply.shop", Priority: domain.PriorityNormal, Body: o.Body}, o)

	other, err := domain.ParseOrderDocument([]byte(`{"type":"OrderCancelled","order":{"id":"A-17"}}`), 0)
	require.NoError(t, err)
	assert.False(t, other.Matches(w.Trigger, "shop.orders", ""))

	byKey := &domain.Workflow{Name: "k", Trigger: domain.Trigger{IDField: domain.KeyIDField}}
	o, err = other.Order(byKey, "key-1")
	require.NoError(t, err)
	assert.Equal(t, "key-1", o.ID)
}

func TestStepWithoutCompensationIsLeftAlone(t *testing.T) {
	w := orderWorkflow()
	w.Steps[0].Compensation = nil
	task := domain.Fold("o-1", []domain.Event{submitted(), dispatched("reserve-inventory", 1),
		domain.StepSucceeded{TaskID: "o-1", Step: "reserve-inventory", Attempt: 1, Result: json.RawMessage(`{"r":1}`), At: t0},
		dispatched("charge-payment", 1)})
	events, err := task.RecordReply(w, domain.Reply{Step: "charge-payment", Attempt: 1,
		Failure: domain.FailurePermanent, Reason: "no"}, d)
	require.NoError(t, err)
	assert.Equal(t, domain.TaskCompensatedType, events[len(events)-1].EventType(), "%v", events)
	assert.Equal(t, map[string]json.RawMessage{"reserve-inventory": json.RawMessage(`{"r":1}`)}, task.Results(""))
}

func TestOversizedResultFailsTheAttempt(t *testing.T) {
	task := domain.Fold("o-1", []domain.Event{submitted(), dispatched("reserve-inventory", 1)})
	big := json.RawMessage(`"` + string(make([]byte, 0)) + string(bytesOf('a', domain.MaxResultBytes)) + `"`)
	events, err := task.RecordReply(wf, domain.Reply{Step: "reserve-inventory", Attempt: 1,
		Succeeded: true, Result: big}, d)
	require.NoError(t, err)
	failed, ok := events[0].(domain.StepFailed)
	require.True(t, ok, "%v", events)
	assert.Contains(t, failed.Reason, "over the limit")
}

func bytesOf(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

func TestAnOrderCannotChooseWhereTheHTTPAgentCalls(t *testing.T) {
	for _, url := range []string{"{{order.callback}}", "http://{{order.host}}/x", "https://user@evil.example/x", "ftp://files/x"} {
		_, err := domain.ParseDefinition([]byte(`{"name":"w","steps":[{"name":"a","http":{"url":"` + url + `"}}]}`))
		assert.ErrorIs(t, err, domain.ErrInvalidWorkflow, url)
	}
	_, err := domain.ParseDefinition([]byte(`{"name":"w","steps":[{"name":"a","http":{"url":"https://pay.example:8443/charge/{{order.id}}?x={{order.x}}"}}]}`))
	assert.NoError(t, err)
}

func TestAWorkflowCannotStartOnSagasOwnTopics(t *testing.T) {
	for _, topic := range []string{"saga.replies", "saga.cmd.payment", "saga.status", "reply.shop", "saga.reply.x", "__consumer_offsets"} {
		_, err := domain.ParseDefinition([]byte(`{"name":"w","trigger":{"topics":["` + topic + `"]},"steps":[{"name":"a","agent":"x"}]}`))
		assert.ErrorIs(t, err, domain.ErrInvalidWorkflow, topic)
	}
	_, err := domain.ParseDefinition([]byte(`{"name":"w","trigger":{"topics":["orders","shop.events"]},"steps":[{"name":"a","agent":"x"}]}`))
	assert.NoError(t, err)
}

// TestOrderDocumentIsTheWholeBody: anything after the order's object,
// even a stray bracket, makes the body invalid JSON and the order invalid.
func TestOrderDocumentIsTheWholeBody(t *testing.T) {
	for _, body := range []string{`{"orderId":"0"}]`, `{"orderId":"0"}}`, `{"orderId":"0"} x`, `{"orderId":"0"} {}`, `{"orderId":"0"},`} {
		_, err := domain.ParseOrderDocument([]byte(body), 0)
		require.ErrorIs(t, err, domain.ErrInvalidMessage, body)
		assert.Contains(t, err.Error(), "data after the object", body)
	}
	for _, body := range []string{`{"orderId":"0"}`, " \n{\"orderId\":\"0\"}\n\t ", `{"orderId":"0","items":[1,{"a":[]}]}`} {
		_, err := domain.ParseOrderDocument([]byte(body), 0)
		require.NoError(t, err, body)
	}
}
