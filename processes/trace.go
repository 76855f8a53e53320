package processes

import (
	"context"

	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/internal/tracing"
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
const TracerName = tracing.TracerName

// Span names: one per kind of work a process does for a task.
const (
	// SpanSubmit is the submitter handling an order.
	SpanSubmit = tracing.SpanSubmit
	// SpanDispatch is the scheduler sending one attempt of a step (or of
	// its compensation) to its agent.
	SpanDispatch = tracing.SpanDispatch
	// SpanAgent is an agent carrying out one command: every call and
	// retry, up to its reply.
	SpanAgent = tracing.SpanAgent
	// SpanReply is the scheduler recording an agent's reply and deciding
	// what follows.
	SpanReply = tracing.SpanReply
	// SpanCompensate is the scheduler starting to undo a task: the
	// dispatches of its first compensations.
	SpanCompensate = tracing.SpanCompensate
	// SpanTimeout is the supervisor timing an attempt out.
	SpanTimeout = tracing.SpanTimeout
	// SpanDelay is the supervisor firing a delay step whose time came.
	SpanDelay = tracing.SpanDelay
	// SpanOperator is an operator's retry or cancel.
	SpanOperator = tracing.SpanOperator
)

// Span attributes saga sets.
const (
	AttrTaskID          = tracing.AttrTaskID
	AttrWorkflow        = tracing.AttrWorkflow
	AttrWorkflowVersion = tracing.AttrWorkflowVersion
	AttrStep            = tracing.AttrStep
	AttrAgent           = tracing.AttrAgent
	// AttrInstance names the agent instance a command was routed to.
	AttrInstance = tracing.AttrInstance
	AttrAttempt  = tracing.AttrAttempt
	AttrAction   = tracing.AttrAction
	AttrOutcome  = tracing.AttrOutcome
	AttrReason   = tracing.AttrReason
	AttrTries    = tracing.AttrTries
)

// TraceParentOf returns the W3C traceparent of the span ctx carries, ""
// when it carries none.
func TraceParentOf(ctx context.Context) string { return tracing.TraceParentOf(ctx) }

// TraceID returns the id of ctx's trace, "" when it has none.
func TraceID(ctx context.Context) string { return tracing.TraceID(ctx) }
