package engine_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// TestTracingIsOffUnlessAnEndpointIsSet reads the standard variables.
func TestTracingIsOffUnlessAnEndpointIsSet(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_SDK_DISABLED", "")
	assert.False(t, engine.TracingEnabled())
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces")
	assert.True(t, engine.TracingEnabled())
	t.Setenv("OTEL_SDK_DISABLED", "true")
	assert.False(t, engine.TracingEnabled())
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	_, err := engine.Start(engine.Config{DataDir: t.TempDir(), KafkaListen: "127.0.0.1:0", EventStoreListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0"})
	assert.ErrorContains(t, err, "http/protobuf", "only OTLP over HTTP is built in")
}

// TestSpansGoToTheOTLPEndpoint runs an order with OTEL_EXPORTER_OTLP_ENDPOINT
// pointing at a stand-in collector: at Close, the engine has sent the
// order's spans there over OTLP/HTTP, as the service OTEL_SERVICE_NAME.
func TestSpansGoToTheOTLPEndpoint(t *testing.T) {
	var mu sync.Mutex
	var requests []*collector.ExportTraceServiceRequest
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &collector.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		requests = append(requests, req)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	defer otlp.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
	t.Setenv("OTEL_SERVICE_NAME", "shop-saga")

	wf := &domain.Workflow{Name: "one", Steps: []domain.StepDefinition{{Name: "only", Agent: "worker", Budget: 5 * time.Second, MaxAttempts: 1}}}
	app, err := engine.Start(engine.Config{DataDir: t.TempDir(), KafkaListen: "127.0.0.1:0", EventStoreListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Workflows: []*domain.Workflow{wf}, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Agents: map[string]agent.Handler{"worker": func(context.Context, agent.Request) (any, error) { return nil, nil }}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Brokers: app.KafkaBrokers})
	require.NoError(t, err)
	out, err := c.Run(ctx, "exported-1", map[string]any{"workflow": "one"})
	c.Close()
	require.NoError(t, err)
	require.Equal(t, "processed", out.Final.Status)
	app.Close() // flushes the spans

	mu.Lock()
	defer mu.Unlock()
	names := map[string]bool{}
	for _, req := range requests {
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			assert.Equal(t, "shop-saga", service)
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					names[s.GetName()] = true
				}
			}
		}
	}
	for _, want := range []string{processes.SpanSubmit, processes.SpanDispatch, processes.SpanAgent, processes.SpanReply} {
		assert.True(t, names[want], "%s exported, got %v", want, names)
	}
}
