package integration_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// tracedProcess is a TracerProvider exporting a process's spans, named
// as a service, into exporter.
func tracedProcess(t *testing.T, exporter *tracetest.InMemoryExporter, service string) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	t.Cleanup(func() { _ = tp.Shutdown(ctx(t, 5*time.Second)) })
	return tp
}

// spanAttr returns a span's attribute as a string.
func spanAttr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func serviceOf(s tracetest.SpanStub) string {
	v, _ := s.Resource.Set().Value("service.name")
	return v.AsString()
}

// TestOneTracePerOrderAcrossProcesses runs a compensated order on two
// engines, one submitter, scheduler and supervisor, the other the agents,
// each exporting its spans as a service of its own, and follows the trace
// the caller started: submission, each dispatch, each agent's work and its
// HTTP call, the handling of each reply and the compensation, with the
// parent of each being what caused it, and the events and logs naming it.
func TestOneTracePerOrderAcrossProcesses(t *testing.T) {
	exporter := tracetest.NewInMemoryExporter()
	var logs lockedBuffer
	// The core's logs, as JSON, to find the task's ids in them.
	core := startSystem(t, engine.Config{Instance: "core", Roles: []engine.Role{engine.RoleSubmitter, engine.RoleScheduler, engine.RoleSupervisor},
		TracerProvider: tracedProcess(t, exporter, "saga-core"), Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	agents, err := engine.Start(engine.Config{Instance: "agents", Roles: []engine.Role{engine.RoleAgents},
		KafkaBrokers: core.app.KafkaBrokers, EventStoreURL: core.app.EventStoreURL, DemoAgents: true,
		Faults:         map[string][]demo.Fault{"payment": {{Mode: demo.FaultPermanent, Rate: 1}}},
		TracerProvider: tracedProcess(t, exporter, "saga-agents"), Logger: testLogger()})
	require.NoError(t, err)
	t.Cleanup(agents.Close)

	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	order := &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte("traced-1"), Value: []byte(`{"orderId":"traced-1"}`),
		Headers: []kgo.RecordHeader{{Key: protocol.HeaderTraceParent, Value: []byte("00-" + callerTrace + "-" + callerSpan + "-01")}}}
	producer := core.producer()
	require.NoError(t, producer.ProduceSync(ctx(t, 10*time.Second), order).FirstErr())
	task := core.awaitTerminal([]string{"traced-1"}, 30*time.Second)["traced-1"]
	require.Equal(t, domain.StateCompensated, task.State)
	// The same order again: a duplicate, logged with the task's ids.
	require.NoError(t, producer.ProduceSync(ctx(t, 10*time.Second), order).FirstErr())

	// Spans end as their work does, just after the appends the test saw.
	want := []string{processes.SpanSubmit, processes.SpanDispatch, processes.SpanAgent, processes.SpanReply, processes.SpanCompensate}
	var spans tracetest.SpanStubs
	require.Eventually(t, func() bool {
		spans = exporter.GetSpans()
		counts := map[string]int{}
		for _, s := range spans {
			counts[s.Name]++
		}
		// Three dispatches, agent calls and replies: reserve, charge, and
		// the compensation of reserve.
		return counts[processes.SpanSubmit] == 2 && counts[processes.SpanDispatch] == 3 && counts[processes.SpanAgent] == 3 &&
			counts[processes.SpanReply] == 3 && counts[processes.SpanCompensate] == 1
	}, 10*time.Second, 20*time.Millisecond, "spans %v", want)

	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		assert.Equal(t, callerTrace, s.SpanContext.TraceID().String(), "%s continues the caller's trace", s.Name)
		byID[s.SpanContext.SpanID()] = s
	}
	// find returns the one span of a name whose attributes match.
	find := func(name string, attrs ...string) tracetest.SpanStub {
		t.Helper()
		var found []tracetest.SpanStub
		for _, s := range spans {
			match := s.Name == name
			for i := 0; i+1 < len(attrs); i += 2 {
				match = match && spanAttr(s, attrs[i]) == attrs[i+1]
			}
			if match {
				found = append(found, s)
			}
		}
		require.Len(t, found, 1, "%s %v", name, attrs)
		return found[0]
	}
	parentOf := func(s tracetest.SpanStub) tracetest.SpanStub {
		t.Helper()
		p, ok := byID[s.Parent.SpanID()]
		require.True(t, ok, "the parent of %s %s was exported", s.Name, spanAttr(s, "saga.step"))
		return p
	}
	assertChild := func(child, parent tracetest.SpanStub) {
		t.Helper()
		assert.Equal(t, parent.SpanContext.SpanID(), child.Parent.SpanID(), "%s %s %s is a child of %s %s",
			child.Name, spanAttr(child, "saga.step"), spanAttr(child, "saga.action"), parent.Name, spanAttr(parent, "saga.step"))
	}

	submit := find(processes.SpanSubmit, "saga.outcome", "accepted")
	assert.Equal(t, callerSpan, submit.Parent.SpanID().String(), "the submission is a child of the caller's span")
	assert.True(t, submit.Parent.IsRemote())
	assert.Equal(t, "traced-1", spanAttr(submit, "saga.task_id"))
	assert.Equal(t, trace.SpanKindConsumer, submit.SpanKind)

	parent := submit
	for _, step := range []struct{ name, action, outcome string }{
		{"reserve-inventory", protocol.ActionExecute, protocol.OutcomeSucceeded},
		{"charge-payment", protocol.ActionExecute, protocol.OutcomeFailed},
		{"reserve-inventory", protocol.ActionCompensate, protocol.OutcomeSucceeded},
	} {
		dispatch := find(processes.SpanDispatch, "saga.step", step.name, "saga.action", step.action)
		agent := find(processes.SpanAgent, "saga.step", step.name, "saga.action", step.action)
		reply := find(processes.SpanReply, "saga.step", step.name, "saga.action", step.action)
		if step.action == protocol.ActionCompensate {
			compensate := find(processes.SpanCompensate)
			assertChild(compensate, parent)
			parent = compensate
		}
		assertChild(dispatch, parent)
		assertChild(agent, dispatch)
		assertChild(reply, agent)
		assert.Equal(t, step.outcome, spanAttr(agent, "saga.outcome"))
		assert.Equal(t, "saga-core", serviceOf(dispatch))
		assert.Equal(t, "saga-agents", serviceOf(agent), "the agent's span comes from the other process")
		assert.Equal(t, "saga-core", serviceOf(reply))
		// The agent's HTTP call to the service is a span of its own, in
		// the agent's span.
		var calls int
		for _, s := range spans {
			if s.SpanKind == trace.SpanKindClient && s.Parent.SpanID() == agent.SpanContext.SpanID() {
				calls++
				assert.Equal(t, step.name, spanAttr(s, "saga.step"))
			}
		}
		assert.Equal(t, 1, calls, "one HTTP call in %s %s", step.name, step.action)
		parent = reply
	}
	assert.Equal(t, "traced-1", spanAttr(parentOf(find(processes.SpanCompensate)), "saga.task_id"))

	// The stored events name the spans that wrote them: the submission
	// records its own span as the task's trace.
	events := core.stream("traced-1")
	assert.Equal(t, "00-"+callerTrace+"-"+submit.SpanContext.SpanID().String()+"-01", events[0].Metadata.TraceParent)
	assert.Equal(t, events[0].Metadata.TraceParent, task.TraceParent)

	// Where a task is handled, the log says which task and which trace.
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "duplicate order acknowledged") }, 10*time.Second, 20*time.Millisecond)
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, "duplicate order acknowledged") {
			continue
		}
		var entry map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &entry))
		assert.Equal(t, "traced-1", entry["task_id"])
		assert.Equal(t, callerTrace, entry["trace_id"])
	}
}
