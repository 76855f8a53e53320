package kafka

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// TestRecordHeadersRoundTrip: a record built by NewRecord reads back, as
// the processes see it, with its key and every header value it was given.
func TestRecordHeadersRoundTrip(t *testing.T) {
	parent := protocol.NewTraceParent()
	rec := NewRecord("saga.replies", "task-1", protocol.StepReplyMessageType, "saga/agent-a", []byte(`{"x":1}`), parent)
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "extra", Value: []byte("é")}, kgo.RecordHeader{Key: "empty"})
	rec.Partition, rec.Offset = 2, 41
	msg := inbound(rec)
	assert.Equal(t, "task-1", msg.Key)
	assert.Equal(t, []byte(`{"x":1}`), msg.Value)
	assert.Equal(t, "saga.replies/2/41", msg.Source())
	require.Len(t, msg.Headers, len(rec.Headers))
	for _, h := range rec.Headers {
		assert.Equal(t, string(h.Value), msg.Headers.Get(h.Key), h.Key)
	}
	assert.Equal(t, parent, msg.Headers.Get(HeaderTraceParent))
	assert.Equal(t, protocol.StepReplyMessageType, msg.Headers.Get(HeaderType))
	assert.Equal(t, "saga/agent-a", msg.Headers.Get(HeaderSource))
	assert.Equal(t, "task-1", msg.Headers.Get(HeaderSubject))
	assert.Equal(t, "application/json", msg.Headers.Get(HeaderContentType))
	// The values share a buffer: appending to one must not overwrite the
	// next.
	rec.Key = append(rec.Key, 'X')
	rec.Headers[0].Value = append(rec.Headers[0].Value, 'X')
	assert.Equal(t, "1.0", string(rec.Headers[1].Value))
	assert.Equal(t, parent, string(rec.Headers[0].Value[:55]))
}

// Benchmark results go to these, so that they escape as they do in use.
var (
	sinkRecord  *kgo.Record
	sinkInbound processes.Inbound
)

func BenchmarkNewRecord(b *testing.B) {
	parent := protocol.NewTraceParent()
	body := []byte(`{"task_id":"task-1"}`)
	b.ReportAllocs()
	for b.Loop() {
		sinkRecord = NewRecord("saga.replies", "0190b0a4-7c1e-7b5e-9a51-3c2f1d0e4b6a", protocol.StepReplyMessageType, "saga/agent-a", body, parent)
	}
}

func BenchmarkInbound(b *testing.B) {
	rec := NewRecord("saga.replies", "0190b0a4-7c1e-7b5e-9a51-3c2f1d0e4b6a", protocol.StepReplyMessageType, "saga/agent-a", []byte(`{}`), protocol.NewTraceParent())
	b.ReportAllocs()
	for b.Loop() {
		sinkInbound = inbound(rec)
	}
}

func BenchmarkSendReplyEncoding(b *testing.B) {
	reply := protocol.StepReply{TaskID: "0190b0a4-7c1e-7b5e-9a51-3c2f1d0e4b6a", Step: "reserve-stock", Action: "reserve", Outcome: "succeeded",
		Agent: "inventory", Instance: "inventory-1", Result: []byte(`{"reservation":"r-123456","items":2}`)}
	b.ReportAllocs()
	for b.Loop() {
		body, err := encodeReply(reply)
		if err != nil {
			b.Fatal(err)
		}
		sinkBody = body
	}
}

var sinkBody []byte
