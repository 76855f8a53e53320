package httpagent_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/adapters/httpagent"
	"github.com/sagaengine/saga/domain"
)

// TestCallCarriesItsSpan makes a call inside a span, as the agent runtime
// does: the call gets a client span, a child of it, and the service
// receives that span's context as traceparent.
func TestCallCarriesItsSpan(t *testing.T) {
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	srv := newRecorder(t, answer(http.StatusCreated, `{}`))
	h := httpagent.New(httpagent.Config{TracerProvider: tp})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx, parent := tp.Tracer("test").Start(ctx, "agent")
	_, err := h.Handle(ctx, command(&domain.HTTPCall{URL: srv.URL + "/accounts"}))
	require.NoError(t, err)
	parent.End()

	spans := exporter.GetSpans()
	require.Len(t, spans, 2)
	call := spans[0]
	assert.Equal(t, "POST", call.Name)
	assert.Equal(t, trace.SpanKindClient, call.SpanKind)
	assert.Equal(t, parent.SpanContext().SpanID(), call.Parent.SpanID(), "the call is a child of the agent's span")
	want := "00-" + call.SpanContext.TraceID().String() + "-" + call.SpanContext.SpanID().String() + "-01"
	assert.Equal(t, want, srv.last(t).Header.Get(httpagent.TraceParentHeader), "the service receives the call's span")
	attrs := map[string]any{}
	for _, kv := range call.Attributes {
		attrs[string(kv.Key)] = kv.Value.AsInterface()
	}
	assert.Equal(t, int64(http.StatusCreated), attrs["http.response.status_code"])
	assert.Equal(t, "o-1", attrs["saga.task_id"])
}
