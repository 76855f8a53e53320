// Package tracing holds the span names, attributes and helpers with which
// the process managers and the agent runtime start their spans, through
// the OpenTelemetry API only.
package tracing

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/port"
)

// Trace context helpers, from the wire protocol.
var (
	// NewTraceParent starts a W3C trace.
	NewTraceParent = protocol.NewTraceParent
	// ValidTraceParent reports whether a traceparent header can be trusted.
	ValidTraceParent = protocol.ValidTraceParent
	// ChildTraceParent continues a trace with a new span.
	ChildTraceParent = protocol.ChildTraceParent
)

// Tracing. The processes start their spans through the OpenTelemetry API
// only, on the TracerProvider they are given (the global one when nil,
// which does nothing unless the program set one); the SDK and the
// exporters are wired by adapters/engine, so no exporter (nor gRPC) is
// linked into this package. Each message a process sends carries the span
// that sent it as its traceparent, so the receiver's spans are its
// children: one trace per order, from the caller's traceparent on.

// TracerName names the tracer of the processes' spans.
const TracerName = "github.com/sagaengine/saga/processes"

// Span names: one per kind of work a process does for a task.
const (
	// SpanSubmit is the submitter handling an order.
	SpanSubmit = "saga.submit"
	// SpanDispatch is the scheduler sending one attempt of a step (or of
	// its compensation) to its agent.
	SpanDispatch = "saga.dispatch"
	// SpanAgent is an agent carrying out one command: every call and
	// retry, up to its reply.
	SpanAgent = "saga.agent"
	// SpanReply is the scheduler recording an agent's reply and deciding
	// what follows.
	SpanReply = "saga.reply"
	// SpanCompensate is the scheduler starting to undo a task: the
	// dispatches of its first compensations.
	SpanCompensate = "saga.compensate"
	// SpanTimeout is the supervisor timing an attempt out.
	SpanTimeout = "saga.timeout"
	// SpanDelay is the supervisor firing a delay step whose time came.
	SpanDelay = "saga.delay"
	// SpanOperator is an operator's retry or cancel.
	SpanOperator = "saga.operator"
)

// Span attributes saga sets.
const (
	AttrTaskID          = attribute.Key("saga.task_id")
	AttrWorkflow        = attribute.Key("saga.workflow")
	AttrWorkflowVersion = attribute.Key("saga.workflow_version")
	AttrStep            = attribute.Key("saga.step")
	AttrAgent           = attribute.Key("saga.agent")
	// AttrInstance names the agent instance a command was routed to.
	AttrInstance = attribute.Key("saga.agent.instance")
	AttrAttempt  = attribute.Key("saga.attempt")
	AttrAction   = attribute.Key("saga.action")
	AttrOutcome  = attribute.Key("saga.outcome")
	AttrReason   = attribute.Key("saga.reason")
	AttrTries    = attribute.Key("saga.tries")
)

// Tracer returns the processes' tracer of tp, or of the global provider
// when tp is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// SpanContextOf parses a W3C traceparent into a remote span context.
func SpanContextOf(traceparent string) (trace.SpanContext, bool) {
	if !ValidTraceParent(traceparent) {
		return trace.SpanContext{}, false
	}
	// ValidTraceParent checked the lowercase hex digits: decode them in
	// place (otel's TraceIDFromHex copies them twice and checks them again;
	// every message consumed pays this).
	var tid trace.TraceID
	var sid trace.SpanID
	var flags [1]byte
	unhex(tid[:], traceparent[3:35])
	unhex(sid[:], traceparent[36:52])
	unhex(flags[:], traceparent[53:55])
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags[0]), Remote: true}), true
}

// unhex decodes the lowercase hex digits of s into dst, len(s)/2 bytes.
func unhex(dst []byte, s string) {
	for i := range dst {
		dst[i] = nibble(s[2*i])<<4 | nibble(s[2*i+1])
	}
}

func nibble(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}

// formatTraceParent formats a span context as a W3C traceparent.
func formatTraceParent(sc trace.SpanContext) string {
	tid, sid := sc.TraceID(), sc.SpanID()
	return traceParent(tid[:], sid[:], byte(sc.TraceFlags()))
}

// traceParent formats a W3C traceparent, in one allocation.
func traceParent(tid, sid []byte, flags byte) string {
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid)
	b[35] = '-'
	hex.Encode(b[36:52], sid)
	b[52] = '-'
	hex.Encode(b[53:55], []byte{flags})
	return string(b[:])
}

// WithTraceParent returns ctx with traceparent as the remote parent of the
// spans started from it; an invalid traceparent leaves ctx as it is.
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	if sc, ok := SpanContextOf(traceparent); ok {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

// RecordedTraceParent returns the traceparent of ctx's span when the span
// is recorded, so that what ctx's work sends or stores names that span.
func RecordedTraceParent(ctx context.Context) (string, bool) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return "", false
	}
	return formatTraceParent(span.SpanContext()), true
}

// OutgoingTraceParent is the traceparent of a message sent from ctx: the
// span of ctx when it is recorded; otherwise (tracing is off) a new span
// id in ctx's trace, or in fallback's, or a new trace, as saga did before
// it had spans.
func OutgoingTraceParent(ctx context.Context, fallback string) string {
	if tp, ok := RecordedTraceParent(ctx); ok {
		return tp
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		tid := sc.TraceID()
		var sid [8]byte
		binary.LittleEndian.PutUint64(sid[:], rand.Uint64()|1) // never all zero
		return traceParent(tid[:], sid[:], byte(sc.TraceFlags()))
	}
	return ChildTraceParent(fallback)
}

// StoredTraceParent is the traceparent recorded in the metadata of events
// appended from ctx: the span doing the work, or the one that caused it
// (an event or message whose traceparent ctx carries); none outside a
// trace.
func StoredTraceParent(ctx context.Context) string { return TraceParentOf(ctx) }

// ConsumerSpan starts the span of handling an inbound message, a child of
// the message's traceparent (a new trace when it has none).
func ConsumerSpan(ctx context.Context, tr trace.Tracer, name string, msg port.Inbound) (context.Context, trace.Span) {
	ctx, span := tr.Start(WithTraceParent(ctx, msg.Headers.Get(protocol.HeaderTraceParent)), name, trace.WithSpanKind(trace.SpanKindConsumer))
	switch {
	case !span.IsRecording():
	case msg.InProcess():
		span.SetAttributes(attribute.String("messaging.system", "in-process"), attribute.String("messaging.destination.name", msg.Topic))
	default:
		span.SetAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", msg.Topic),
			attribute.Int("messaging.kafka.destination.partition", int(msg.Partition)), attribute.Int64("messaging.kafka.message.offset", msg.Offset))
	}
	return ctx, span
}

// SetAttributes sets attributes on a span that records: with tracing off,
// the hot paths build none.
func SetAttributes(span trace.Span, attrs func() []attribute.KeyValue) {
	if span.IsRecording() {
		span.SetAttributes(attrs()...)
	}
}

// FailSpan marks span as failed with err.
func FailSpan(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// EndSpan ends span, marked failed when err is not nil.
func EndSpan(span trace.Span, err error) {
	if err != nil {
		FailSpan(span, err)
	}
	span.End()
}

// TraceParentOf returns the W3C traceparent of the span ctx carries, ""
// when it carries none.
func TraceParentOf(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return formatTraceParent(sc)
	}
	return ""
}

// TraceID returns the id of ctx's trace, "" when it has none.
func TraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// TaskLogger returns logger with what every line about a task carries:
// task_id and, when ctx is in a trace, trace_id.
func TaskLogger(ctx context.Context, logger *slog.Logger, taskID string) *slog.Logger {
	if id := TraceID(ctx); id != "" {
		return logger.With("task_id", taskID, "trace_id", id)
	}
	return logger.With("task_id", taskID)
}
