package protocol_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain/protocol"
)

func TestTraceContext(t *testing.T) {
	root := protocol.NewTraceParent()
	assert.True(t, protocol.ValidTraceParent(root), root)
	child := protocol.ChildTraceParent(root)
	assert.Equal(t, root[:36], child[:36], "a child continues the trace")
	assert.NotEqual(t, root[36:52], child[36:52], "with a span of its own")
	for _, bad := range []string{"", "00-" + string(make([]byte, 1<<20)), "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00-00000000000000000000000000000000-b7ad6b7169203331-01", "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"} {
		assert.False(t, protocol.ValidTraceParent(bad), "%.60q", bad)
		assert.True(t, protocol.ValidTraceParent(protocol.ChildTraceParent(bad)), "an untrusted parent starts a new trace")
	}
}

func TestHeadersAreCloudEventsBinaryMode(t *testing.T) {
	hs := protocol.Headers("saga.order.placed", "saga/test", "o-1", "", time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	got := map[string]string{}
	for _, h := range hs {
		got[h.Key] = h.Value
	}
	assert.Equal(t, "1.0", got[protocol.HeaderSpecVersion])
	assert.Equal(t, "saga.order.placed", got[protocol.HeaderType])
	assert.Equal(t, "o-1", got[protocol.HeaderSubject])
	assert.Equal(t, "2026-11-22T10:00:00Z", got[protocol.HeaderTime])
	assert.Len(t, got[protocol.HeaderID], 36)
	assert.True(t, protocol.ValidTraceParent(got[protocol.HeaderTraceParent]))
}

// TestHeadersCarryTheSendersSpan keeps a valid traceparent as the sender
// gave it, so that the span that sent a message is its receiver's parent,
// and replaces an invalid one by a new trace.
func TestHeadersCarryTheSendersSpan(t *testing.T) {
	traceparent := func(tp string) string {
		for _, h := range protocol.Headers("saga.step.execute", "saga/test", "o-1", tp, time.Now()) {
			if h.Key == protocol.HeaderTraceParent {
				return h.Value
			}
		}
		return ""
	}
	const sent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	assert.Equal(t, sent, traceparent(sent))
	for _, bad := range []string{"", "00-zz", sent + "0"} {
		got := traceparent(bad)
		assert.True(t, protocol.ValidTraceParent(got), got)
		assert.NotEqual(t, sent[3:35], got[3:35])
	}
}

// TestAppendHeaderValuesWritesTheValuesOfHeaders: a producer's buffer holds
// the same values Headers returns, in HeaderKeys' order, within the size
// HeaderValuesSize promises, after what the buffer held.
func TestAppendHeaderValuesWritesTheValuesOfHeaders(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 30, 0, 123456789, time.FixedZone("CET", 3600))
	const sent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tp := range []string{sent, "", "00-zz"} {
		hs := protocol.Headers("saga.step.execute", "saga/test", "o-1", tp, now)
		buf, ends := protocol.AppendHeaderValues([]byte("key"), "saga.step.execute", "saga/test", "o-1", tp, now)
		require.Len(t, hs, len(protocol.HeaderKeys))
		assert.LessOrEqual(t, len(buf)-len("key"), protocol.HeaderValuesSize("saga.step.execute", "saga/test", "o-1"))
		start := len("key")
		for i, end := range ends {
			assert.Equal(t, protocol.HeaderKeys[i], hs[i].Key)
			got := string(buf[start:end])
			start = end
			switch hs[i].Key {
			case protocol.HeaderID, protocol.HeaderTraceParent:
				if hs[i].Key == protocol.HeaderTraceParent && tp == sent {
					assert.Equal(t, sent, got)
					continue
				}
				// Random: the same shape, not the same value.
				assert.Len(t, got, len(hs[i].Value), hs[i].Key)
			default:
				assert.Equal(t, hs[i].Value, got, hs[i].Key)
			}
		}
		assert.Equal(t, "2026-11-26T09:30:00.123456789Z", string(buf[ends[4]:ends[5]]))
	}
}

// TestNewIDsAreVersion4UUIDs: ce_id is a random UUID in its canonical form.
func TestNewIDsAreVersion4UUIDs(t *testing.T) {
	uuidV4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 100 {
		for _, h := range protocol.Headers("t", "s", "o", "", time.Now()) {
			if h.Key == protocol.HeaderID {
				require.Regexp(t, uuidV4, h.Value)
				require.False(t, seen[h.Value], "ids repeat")
				seen[h.Value] = true
			}
		}
	}
}
