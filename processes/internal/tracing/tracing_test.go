package tracing_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/internal/tracing"
	"github.com/sagaengine/saga/processes/port"
)

// TestSpanContextOfAgreesWithOtel: the traceparent is parsed as otel's own
// parsers would, and formatted back byte for byte.
func TestSpanContextOfAgreesWithOtel(t *testing.T) {
	for _, tp := range []string{
		protocol.NewTraceParent(),
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00-ffffffffffffffffffffffffffffffff-0000000000000001-00",
		"00-0123456789abcdef0123456789abcdef-fedcba9876543210-9a",
	} {
		sc, ok := tracing.SpanContextOf(tp)
		require.True(t, ok, tp)
		tid, err := trace.TraceIDFromHex(tp[3:35])
		require.NoError(t, err)
		sid, err := trace.SpanIDFromHex(tp[36:52])
		require.NoError(t, err)
		assert.Equal(t, tid, sc.TraceID(), tp)
		assert.Equal(t, sid, sc.SpanID(), tp)
		assert.Equal(t, tp[53:], sc.TraceFlags().String(), tp)
		assert.True(t, sc.IsRemote())
		assert.Equal(t, tp, tracing.TraceParentOf(trace.ContextWithSpanContext(context.Background(), sc)))
	}
	for _, bad := range []string{"", "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
		"00-00000000000000000000000000000000-b7ad6b7169203331-01", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		_, ok := tracing.SpanContextOf(bad)
		assert.False(t, ok, bad)
	}
}

// TestOutgoingTraceParentContinuesTheTraceWithTracingOff: with no recording
// span, a message sent from a consumed message's context stays in its
// trace, under a new valid span id.
func TestOutgoingTraceParentContinuesTheTraceWithTracingOff(t *testing.T) {
	in := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := tracing.WithTraceParent(context.Background(), in)
	seen := map[string]bool{}
	for range 100 {
		out := tracing.OutgoingTraceParent(ctx, "")
		require.True(t, protocol.ValidTraceParent(out), out)
		assert.Equal(t, in[:36], out[:36], "same trace")
		assert.Equal(t, in[52:], out[52:], "same flags")
		assert.NotEqual(t, in[36:52], out[36:52], "a new span")
		seen[out] = true
	}
	assert.Len(t, seen, 100, "span ids repeat")
	// Outside a trace: the fallback's trace, else a new one.
	assert.Equal(t, in[:36], tracing.OutgoingTraceParent(context.Background(), in)[:36])
	assert.True(t, protocol.ValidTraceParent(tracing.OutgoingTraceParent(context.Background(), "")))
}

func BenchmarkConsumerSpanTracingOff(b *testing.B) {
	tr := tracing.Tracer(nil)
	in := port.Inbound{Topic: "saga.commands.a", Offset: 7, Headers: port.Headers{{Key: protocol.HeaderTraceParent, Value: protocol.NewTraceParent()}}}
	b.ReportAllocs()
	for b.Loop() {
		ctx, span := tracing.ConsumerSpan(context.Background(), tr, tracing.SpanAgent, in)
		_ = tracing.OutgoingTraceParent(ctx, "")
		span.End()
	}
}
