package processes_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

func triggered(name string, topics []string, typ string) *domain.Workflow {
	tr := domain.Trigger{Topics: topics, Type: typ}
	if typ != "" {
		tr.TypeField = "/type"
	}
	return &domain.Workflow{Name: name, Trigger: tr, Steps: []domain.StepDefinition{{Name: "a", Agent: "x"}}}
}

// TestOverlappingTriggersAreRefusedAtCheckAndApply: a workflow that would
// claim events another registered workflow starts on is refused by Check
// (what validate runs) and by Apply alike, naming both workflows; triggers
// that cannot claim one event, and saga's own orders, are accepted.
func TestOverlappingTriggersAreRefusedAtCheckAndApply(t *testing.T) {
	ctx := context.Background()
	reg := processes.NewRegistry(embeddedStore(t), nil)
	_, _, err := reg.Apply(ctx, triggered("billing", []string{"shop.events"}, "checkout.completed"), "team-a")
	require.NoError(t, err)
	_, _, err = reg.Apply(ctx, triggered("order", nil, ""), "team-a")
	require.NoError(t, err)

	for _, refused := range []*domain.Workflow{
		triggered("audit-all", []string{"shop.events"}, ""),                         // no type: every event
		triggered("fulfil", []string{"other", "shop.events"}, "checkout.completed"), // the same type
	} {
		_, err := reg.Check(ctx, refused)
		require.ErrorIs(t, err, domain.ErrInvalidWorkflow, refused.Name)
		assert.Contains(t, err.Error(), `"`+refused.Name+`"`)
		assert.Contains(t, err.Error(), `"billing" (registered)`)
		assert.Contains(t, err.Error(), "topic shop.events")
		_, _, applyErr := reg.Apply(ctx, refused, "team-b")
		require.ErrorIs(t, applyErr, domain.ErrInvalidWorkflow)
		assert.Equal(t, err.Error(), applyErr.Error(), "apply refuses what check refuses, with the same words")
	}
	names, err := reg.Names(ctx, true)
	require.NoError(t, err)
	assert.Equal(t, []string{"billing", "order"}, names, "nothing refused was registered")

	for _, accepted := range []*domain.Workflow{
		triggered("refund", []string{"shop.events"}, "refund.requested"),                   // another type
		triggered("quick", nil, ""),                                                        // orders name their workflow
		triggered("in-orders", []string{"orders"}, "checkout.completed"),                   // orders: only the same type overlaps
		triggered("billing", []string{"shop.events", "shop.legacy"}, "checkout.completed"), // a new version of itself
	} {
		_, _, err := reg.Apply(ctx, accepted, "team-b")
		require.NoError(t, err, accepted.Name)
	}
}

// TestAWorkflowBuiltInGoIsRegisteredWithTheDocumentedDefaults: a step with
// only a name and an agent registers, with the defaults a file gives it.
func TestAWorkflowBuiltInGoIsRegisteredWithTheDocumentedDefaults(t *testing.T) {
	ctx := context.Background()
	reg := processes.NewRegistry(embeddedStore(t), nil)
	minimal := &domain.Workflow{Name: "hello", Steps: []domain.StepDefinition{{Name: "greet", Agent: "greeter",
		Compensation: &domain.CompensationDefinition{Action: "ungreet"}}}}
	checked, err := reg.Check(ctx, minimal)
	require.NoError(t, err)
	assert.Equal(t, domain.DefaultStepBudget, checked.Steps[0].Budget)
	registered, changed, err := reg.Apply(ctx, minimal, "test")
	require.NoError(t, err)
	assert.True(t, changed)
	step := registered.Steps[0]
	assert.Equal(t, domain.DefaultStepBudget, step.Budget)
	assert.Equal(t, domain.DefaultStepAttempts, step.MaxAttempts)
	assert.Equal(t, domain.DefaultBackoff, step.Backoff)
	assert.Equal(t, domain.DefaultCompensationAttempts, step.Compensation.MaxAttempts)
	_, changed, err = reg.Apply(ctx, minimal, "test")
	require.NoError(t, err)
	assert.False(t, changed, "the same Go value again is the same definition")
}

// TestADefinitionStoredWithAZeroMultiplierStillReads: definitions
// registered before a multiplier of 0 was refused read as they ran.
func TestADefinitionStoredWithAZeroMultiplierStillReads(t *testing.T) {
	ctx := context.Background()
	store := embeddedStore(t)
	def := `{"name":"old","steps":[{"name":"a","agent":"x","budget":"1s","attempts":2,` +
		`"backoff":{"initial":"0s","multiplier":0,"max":"0s","jitter":0},` +
		`"compensation":{"action":"undo-a","budget":"1s","attempts":5,"backoff":{"initial":"1s","multiplier":0,"max":"0s","jitter":0}}}]}`
	data, err := json.Marshal(domain.WorkflowRegistered{Name: "old", Version: 1, Definition: json.RawMessage(def), RegisteredAt: time.Now()})
	require.NoError(t, err)
	_, err = store.Append(ctx, domain.WorkflowStream("old"), domain.ExpectAny(), domain.NewEvent{Type: domain.WorkflowRegisteredType, Data: data})
	require.NoError(t, err)
	w, err := processes.NewRegistry(store, nil).Workflow(ctx, "old", 1)
	require.NoError(t, err)
	assert.Equal(t, 1.0, w.Steps[0].Backoff.Multiplier)
	assert.Equal(t, 1.0, w.Steps[0].Compensation.Backoff.Multiplier)
	assert.Equal(t, time.Second, w.Steps[0].Compensation.Backoff.Delay(3, 0), "as it ran: no growth")
}

// TestATypeFieldFallsBackToTheCloudEventsHeader: a trigger with a
// typeField starts on a CloudEvent in binary mode, whose type is only in
// its ce_type header; the body's field wins when present; and a message
// nothing starts on is refused with what was read where.
func TestATypeFieldFallsBackToTheCloudEventsHeader(t *testing.T) {
	ctx := context.Background()
	reg := processes.NewRegistry(embeddedStore(t), nil)
	_, _, err := reg.Apply(ctx, triggered("billing", []string{"shop.events"}, "checkout.completed"), "test")
	require.NoError(t, err)
	doc := func(body string) domain.OrderDocument {
		d, err := domain.ParseOrderDocument([]byte(body), 1<<20)
		require.NoError(t, err)
		return d
	}

	w, err := reg.Select(ctx, "shop.events", doc(`{"orderId":"o-1"}`), "checkout.completed")
	require.NoError(t, err, "binary mode: the type in ce_type only")
	assert.Equal(t, "billing", w.Name)
	w, err = reg.Select(ctx, "shop.events", doc(`{"orderId":"o-2","type":"checkout.completed"}`), "")
	require.NoError(t, err, "structured mode: the type in the body")
	assert.Equal(t, "billing", w.Name)

	_, err = reg.Select(ctx, "shop.events", doc(`{"orderId":"o-3","type":"cart.abandoned"}`), "checkout.completed")
	require.ErrorIs(t, err, domain.ErrUnknownWorkflow, "the body's field wins over the header")
	assert.Contains(t, err.Error(), `no workflow starts on topic shop.events for this event's type: read /type "cart.abandoned"`)
	_, err = reg.Select(ctx, "shop.events", doc(`{"orderId":"o-4"}`), "cart.abandoned")
	require.ErrorIs(t, err, domain.ErrUnknownWorkflow)
	assert.Contains(t, err.Error(), `read no /type field, ce_type header "cart.abandoned"`)
}
