package processes

import "github.com/sagaengine/saga/domain/protocol"

// Trace context helpers, from the wire protocol.
var (
	// NewTraceParent starts a W3C trace.
	NewTraceParent = protocol.NewTraceParent
	// ValidTraceParent reports whether a traceparent header can be trusted.
	ValidTraceParent = protocol.ValidTraceParent
	// ChildTraceParent continues a trace with a new span.
	ChildTraceParent = protocol.ChildTraceParent
)
