package domain_test

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

// amplifyingBody is a step body that repeats {{order.blob}} n times in one
// string: with a 50 KB blob, 20,000 of them once drove sagad past 1.5 GiB.
func amplifyingBody(n int) string {
	return `{"x":"` + strings.Repeat("{{order.blob}}", n) + `"}`
}

func TestDefinitionWithTooManyPlaceholdersIsRefused(t *testing.T) {
	_, err := domain.ParseDefinition([]byte(`{"name":"amplify","steps":[{"name":"a","http":{"url":"http://svc/a","body":` +
		amplifyingBody(20000) + `}}]}`))
	require.ErrorIs(t, err, domain.ErrInvalidWorkflow)
	assert.Contains(t, err.Error(), "20000 placeholders")

	_, err = domain.ParseDefinition([]byte(`{"name":"fine","steps":[{"name":"a","http":{"url":"http://svc/a","body":` +
		amplifyingBody(domain.MaxTemplatePlaceholders) + `}}]}`))
	assert.NoError(t, err, "as many placeholders as the limit are accepted")
}

func TestRenderOverTheBoundFailsWithoutLargeAllocation(t *testing.T) {
	data := domain.TemplateData{TaskID: "o-1", Order: json.RawMessage(`{"orderId":"o-1","blob":"` + strings.Repeat("b", 50_000) + `"}`)}
	body := json.RawMessage(amplifyingBody(2000)) // 100 MB rendered, unbounded
	const limit = 1 << 20

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := domain.NewRenderer(data, limit).JSON(body)
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, domain.ErrRenderTooLarge)
	assert.ErrorIs(t, err, domain.ErrTemplate)
	assert.Contains(t, err.Error(), "{{order.blob}}")
	allocated := after.TotalAlloc - before.TotalAlloc
	assert.Less(t, allocated, uint64(4*limit), "bytes allocated by a rendering bounded at %d", limit)

	_, err = domain.NewRenderer(data, limit).Text(strings.Repeat("{{order.blob}}", 2000), nil)
	assert.ErrorIs(t, err, domain.ErrRenderTooLarge, "text templates are bounded too")

	r := domain.NewRenderer(data, 3*50_000)
	_, err = r.Text("http://svc/{{order.blob}}", domain.EscapeURLValue)
	require.NoError(t, err)
	_, err = r.JSON(json.RawMessage(`{"a":"{{order.blob}}","b":"{{order.blob}}"}`))
	assert.ErrorIs(t, err, domain.ErrRenderTooLarge, "URL, headers and body share one bound")
}

func TestRenderDecodesTheOrderOnce(t *testing.T) {
	order := json.RawMessage(`{"orderId":"o-1","blob":"` + strings.Repeat("b", 50_000) + `","n":1}`)
	r := domain.NewRenderer(domain.TemplateData{Order: order}, 0)
	_, err := r.Text("{{order.n}}", nil) // decodes the order
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(10, func() {
		_, err := r.Text(strings.Repeat("{{order.n}}", 100), nil)
		require.NoError(t, err)
	})
	// Decoding the order would cost thousands of allocations each time;
	// a lookup costs the path's split and the output.
	assert.Less(t, allocs, float64(1000))
}
