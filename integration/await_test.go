package integration_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/workflowfile"
	"github.com/sagaengine/saga/domain"
)

// awaitPayWorkflow charges through the shop, then waits for the payment
// provider's event on the application's own topic shop.payments, with
// budget as its deadline.
func awaitPayWorkflow(t *testing.T, name, shop, budget string) *domain.Workflow {
	t.Helper()
	w, err := workflowfile.Parse(name+".yaml", []byte(`
name: `+name+`
steps:
  - name: charge
    http: {url: "`+shop+`/charge"}
    compensation: {http: {url: "`+shop+`/refund", body: {paymentId: "{{result.paymentId}}"}}}
  - name: captured
    await: {topic: shop.payments, typeField: /type, correlate: /orderId, value: "{{ order.orderId }}",
            succeedOn: [PaymentCaptured], failOn: [PaymentDeclined]}
    budget: `+budget+`
  - name: confirm
    http: {url: "`+shop+`/email", body: {captured: "{{results.captured.amount}}"}}
`))
	require.NoError(t, err)
	return w
}

// TestAwaitStepsThroughKafka runs await steps through Kafka alone: the
// order and the application's events are published with kcat, the steps
// around the await are HTTP calls of the built-in agent. An event
// published before its order (even before the task exists) and one after
// the task waits both complete their step, whose result is the event; a
// PaymentDeclined fails it for good and the charge is refunded; an await
// with a short budget is compensated at its deadline.
func TestAwaitStepsThroughKafka(t *testing.T) {
	requireTools(t, "kcat")
	shop := startShop(t)
	s := startSystem(t, engine.Config{})
	s.register(awaitPayWorkflow(t, "pay", shop, "5m"))
	s.register(awaitPayWorkflow(t, "pay-short", shop, "1s"))

	brokers := strings.Join(s.app.KafkaBrokers, ",")
	kcat := func(topic, key, body string) {
		t.Helper()
		cmd := exec.Command("kcat", "-P", "-b", brokers, "-t", topic, "-k", key)
		cmd.Stdin = strings.NewReader(body + "\n")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	order := func(id, workflow string) {
		kcat("orders", id, `{"orderId":"`+id+`","workflow":"`+workflow+`"}`)
	}
	awaiting := func(id string) {
		t.Helper()
		s.awaitTasks([]string{id}, 60*time.Second, func(t *domain.Task) bool {
			return t.Step("captured") != nil && t.Step("captured").State == domain.StepStateAwaiting
		})
	}

	// Before: the provider's event comes first.
	kcat("shop.payments", "aw-early", `{"type":"PaymentCaptured","orderId":"aw-early","amount":7}`)
	order("aw-early", "pay")

	// After: the task waits, the view says so, then the event comes.
	order("aw-late", "pay")
	awaiting("aw-late")
	require.Eventually(t, func() bool {
		v, ok, _ := s.app.Tasks.Get(context.Background(), "aw-late")
		return ok && v.Steps[1].State == domain.StepStateAwaiting && v.Steps[1].Awaiting != nil && v.Steps[1].CompleteBy != nil
	}, 10*time.Second, 10*time.Millisecond, "the task view shows the step awaiting, and until when")
	v, _, _ := s.app.Tasks.Get(context.Background(), "aw-late")
	assert.Equal(t, "aw-late", v.Steps[1].Awaiting.Value)
	assert.WithinDuration(t, time.Now().Add(5*time.Minute), v.Steps[1].Awaiting.Until, time.Minute)
	out, code := s.sagactl("get", "aw-late")
	require.Zero(t, code, out)
	assert.Contains(t, out, "captured awaits an event on shop.payments for aw-late until", out)
	kcat("shop.payments", "other", `{"type":"PaymentCaptured","orderId":"someone-else","amount":1}`)
	kcat("shop.payments", "aw-late", `{"type":"PaymentCaptured","orderId":"aw-late","amount":9}`)

	// Declined: the charge is refunded.
	order("aw-declined", "pay")
	awaiting("aw-declined")
	kcat("shop.payments", "aw-declined", `{"type":"PaymentDeclined","orderId":"aw-declined"}`)

	// Deadline: nothing comes within the budget.
	order("aw-deadline", "pay-short")

	tasks := s.awaitTerminal([]string{"aw-early", "aw-late", "aw-declined", "aw-deadline"}, 90*time.Second)
	for _, id := range []string{"aw-early", "aw-late"} {
		task := tasks[id]
		require.Equal(t, domain.StateProcessed, task.State, "%s: %s", id, task.Reason)
		assert.Equal(t, domain.StepStateProcessed, task.Step("captured").State)
		assert.Contains(t, string(task.Step("captured").Result), `"orderId":"`+id+`"`, "the event is the step's result")
		assert.Equal(t, 1, countOf(types(s.stream(id)), domain.StepAwaitingType), id)
	}
	assert.Equal(t, domain.StateCompensated, tasks["aw-declined"].State, tasks["aw-declined"].Reason)
	assert.Equal(t, domain.FailurePermanent, tasks["aw-declined"].Step("captured").LastFailure)
	assert.Equal(t, domain.StateCompensated, tasks["aw-deadline"].State, tasks["aw-deadline"].Reason)
	assert.Equal(t, domain.FailureTimeout, tasks["aw-deadline"].Step("captured").LastFailure)
	assert.Contains(t, types(s.stream("aw-deadline")), domain.StepTimedOutType)

	st := shopStateOf(t, shop)
	assert.Len(t, st.Refunds, 2, "the declined and the timed-out charges are refunded: %v", st.Refunds)
	assert.Empty(t, st.Refused)
	assert.Len(t, st.Emails, 2, "confirm ran for the captured payments only: %v", st.Emails)
	// aw-late's and aw-declined's events found their task waiting; aw-early's
	// did too if the awaiter read it only once its task waited.
	completed, err := strconv.Atoi(s.metric(`saga_await_events_total{outcome="completed"}`))
	require.NoError(t, err)
	assert.Contains(t, []int{2, 3}, completed)
}
