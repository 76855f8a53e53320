package domain_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]domain.Priority{"": domain.PriorityNormal, "high": domain.PriorityHigh, "normal": domain.PriorityNormal, "low": domain.PriorityLow} {
		got, err := domain.ParsePriority(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"HIGH", "urgent", "0", "9", " high"} {
		_, err := domain.ParsePriority(in)
		assert.ErrorIs(t, err, domain.ErrInvalidPriority, in)
	}
	assert.Less(t, domain.PriorityHigh.Rank(), domain.PriorityNormal.Rank())
	assert.Less(t, domain.PriorityNormal.Rank(), domain.PriorityLow.Rank())
	assert.Equal(t, domain.PriorityNormal.Rank(), domain.Priority("").Rank(), "empty (older events) is normal")
}

func TestOrderPriorityFromTheMessageOrTheWorkflow(t *testing.T) {
	plain := &domain.Workflow{Name: "w"}
	lowByDefault := &domain.Workflow{Name: "w", Priority: domain.PriorityLow}
	nested := &domain.Workflow{Name: "w", Trigger: domain.Trigger{PriorityField: "/meta/urgency"}}
	for _, c := range []struct {
		name string
		wf   *domain.Workflow
		body string
		want domain.Priority
	}{
		{"absent is normal", plain, `{"orderId":"o-1"}`, domain.PriorityNormal},
		{"null is normal", plain, `{"orderId":"o-1","priority":null}`, domain.PriorityNormal},
		{"named", plain, `{"orderId":"o-1","priority":"high"}`, domain.PriorityHigh},
		{"workflow default", lowByDefault, `{"orderId":"o-1"}`, domain.PriorityLow},
		{"the message over the default", lowByDefault, `{"orderId":"o-1","priority":"high"}`, domain.PriorityHigh},
		{"trigger field", nested, `{"orderId":"o-1","meta":{"urgency":"low"},"priority":"high"}`, domain.PriorityLow},
	} {
		doc, err := domain.ParseOrderDocument([]byte(c.body), 0)
		require.NoError(t, err)
		o, err := doc.Order(c.wf, "")
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, o.Priority, c.name)
	}
	for _, body := range []string{`{"orderId":"o-1","priority":"urgent"}`, `{"orderId":"o-1","priority":1}`, `{"orderId":"o-1","priority":""}`, `{"orderId":"o-1","priority":["high"]}`} {
		doc, err := domain.ParseOrderDocument([]byte(body), 0)
		require.NoError(t, err)
		_, err = doc.Order(plain, "")
		assert.ErrorIs(t, err, domain.ErrInvalidMessage, body)
		assert.ErrorContains(t, err, "priority", body)
	}
}

func TestPriorityIsRecordedAndOlderEventsReadAsNormal(t *testing.T) {
	wf := &domain.Workflow{Name: "w", Version: 1, Steps: []domain.StepDefinition{{Name: "a", Agent: "x"}}}
	high := domain.Submit(domain.Order{ID: "o-1", Priority: domain.PriorityHigh}, wf, "", time.Unix(0, 0))
	normal := domain.Submit(domain.Order{ID: "o-2", Priority: domain.PriorityNormal}, wf, "", time.Unix(0, 0))
	assert.Equal(t, domain.PriorityHigh, domain.Fold("o-1", []domain.Event{high}).Priority)
	raw, err := domain.EncodeEvent(normal)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "priority", "a normal task records what it did before priorities")
	var old domain.TaskSubmitted
	require.NoError(t, json.Unmarshal([]byte(`{"taskId":"o-3","workflow":"w","steps":["a"],"order":{},"submittedAt":"2026-01-01T00:00:00Z"}`), &old))
	assert.Equal(t, domain.PriorityNormal, domain.Fold("o-3", []domain.Event{old}).Priority)
}

func TestAgingRaisesPriorityOneBandPerInterval(t *testing.T) {
	aging := 2 * time.Second
	for _, c := range []struct {
		p      domain.Priority
		waited time.Duration
		want   int
	}{
		{domain.PriorityLow, 0, 2},
		{domain.PriorityLow, 1999 * time.Millisecond, 2},
		{domain.PriorityLow, 2 * time.Second, 1},
		{domain.PriorityLow, 4 * time.Second, 0},
		{domain.PriorityLow, time.Hour, 0},
		{domain.PriorityNormal, 2 * time.Second, 0},
		{domain.PriorityHigh, time.Hour, 0},
		{domain.PriorityNormal, -time.Second, 1},
	} {
		assert.Equal(t, c.want, domain.AgedRank(c.p, c.waited, aging), "%s after %v", c.p, c.waited)
	}
	assert.Equal(t, 1, domain.AgedRank(domain.PriorityLow, domain.DefaultPriorityAging, 0), "0 means the default interval")
}

func TestDefinitionPriority(t *testing.T) {
	w, err := domain.ParseDefinition([]byte(`{"name":"w","priority":"low","trigger":{"priorityField":"/urgency"},"steps":[{"name":"a","agent":"x"}]}`))
	require.NoError(t, err)
	assert.Equal(t, domain.PriorityLow, w.Priority)
	assert.Equal(t, "/urgency", w.Trigger.PriorityField)
	doc, err := w.MarshalDefinition()
	require.NoError(t, err)
	again, err := domain.ParseDefinition(doc)
	require.NoError(t, err)
	assert.True(t, w.Equal(again), "%s", doc)

	before, err := domain.ParseDefinition([]byte(`{"name":"w","steps":[{"name":"a","agent":"x"}]}`))
	require.NoError(t, err)
	namedNormal, err := domain.ParseDefinition([]byte(`{"name":"w","priority":"normal","steps":[{"name":"a","agent":"x"}]}`))
	require.NoError(t, err)
	assert.True(t, before.Equal(namedNormal), "naming the default registers no new version")

	_, err = domain.ParseDefinition([]byte(`{"name":"w","priority":"urgent","trigger":{"priorityField":"urgency"},"steps":[{"name":"a","agent":"x.high"}]}`))
	problems := domain.ProblemsOf(err)
	var paths []string
	for _, p := range problems {
		paths = append(paths, p.Path)
	}
	assert.ElementsMatch(t, []string{"priority", "trigger.priorityField", "steps[0].agent"}, paths, "%v", err)
}
