package esdbwire_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/sagaengine/saga/adapters/esdbwire"
	"github.com/sagaengine/saga/domain"
)

// maxChunk is the chunk size of the tests: the client's.
const maxChunk = 512 << 10

// TestBatchFramesAreProtobuf: the hand-encoded requests read, through
// protobuf, as the append they stand for, in chunks when large.
func TestBatchFramesAreProtobuf(t *testing.T) {
	id := uuid.MustParse("f47ac10b-58cc-4372-a567-0e02b2c3d479")
	big := bytes.Repeat([]byte("x"), maxChunk-100)
	events := []esdb.EventData{
		{EventID: uuid.New(), EventType: "A", ContentType: esdb.ContentTypeJson, Data: []byte(`{}`), Metadata: []byte(`{"m":1}`)},
		{EventID: uuid.New(), EventType: "B", ContentType: esdb.ContentTypeBinary},
		{EventID: uuid.New(), EventType: "C", ContentType: esdb.ContentTypeJson, Data: big},
		{EventID: uuid.New(), EventType: "D", ContentType: esdb.ContentTypeJson, Data: big},
	}
	for _, tc := range []struct {
		expected domain.ExpectedRevision
		want     string
	}{
		{domain.ExpectRevision(1 << 40), "stream_position:1099511627776"},
		{domain.ExpectNoStream(), "no_stream:{}"},
		{domain.ExpectAny(), "any:{}"},
	} {
		frames := esdbwire.AppendRequests(id, "orders-1", tc.expected, events, time.Now().Add(3*time.Second), maxChunk)
		if len(frames) != 3 {
			t.Fatalf("%d frames, want 3 (the big events in chunks of their own)", len(frames))
		}
		var got []*streams.BatchAppendReq_ProposedMessage
		for i, f := range frames {
			var m streams.BatchAppendReq
			if err := proto.Unmarshal(f.B, &m); err != nil {
				t.Fatal(err)
			}
			if u, err := esdbwire.FromShared(m.GetCorrelationId()); err != nil || u != id {
				t.Fatalf("frame %d: correlation id %v, %v", i, u, err)
			}
			if m.GetIsFinal() != (i == len(frames)-1) {
				t.Fatalf("frame %d: is_final %v", i, m.GetIsFinal())
			}
			if (m.GetOptions() != nil) != (i == 0) {
				t.Fatalf("frame %d: options %v", i, m.GetOptions())
			}
			got = append(got, m.GetProposedMessages()...)
			if i > 0 {
				continue
			}
			o := m.GetOptions()
			if string(o.GetStreamIdentifier().GetStreamName()) != "orders-1" {
				t.Fatalf("stream %q", o.GetStreamIdentifier().GetStreamName())
			}
			if s := strings.ReplaceAll(o.String(), " ", ""); !strings.Contains(s, tc.want) {
				t.Fatalf("options %s, want %s", s, tc.want)
			}
			if d := o.GetDeadline().AsDuration(); d <= 2*time.Second || d > 3*time.Second {
				t.Fatalf("deadline %v, want about 3s", d)
			}
		}
		if len(got) != len(events) {
			t.Fatalf("%d events, want %d", len(got), len(events))
		}
		for i, e := range events {
			ct := "application/json"
			if e.ContentType == esdb.ContentTypeBinary {
				ct = "application/octet-stream"
			}
			want := &streams.BatchAppendReq_ProposedMessage{
				Id:       &shared.UUID{Value: &shared.UUID_Structured_{Structured: structured(e.EventID)}},
				Metadata: map[string]string{"type": e.EventType, "content-type": ct}, CustomMetadata: e.Metadata, Data: e.Data,
			}
			if !proto.Equal(got[i], want) {
				t.Fatalf("event %d: %v, want %v", i, got[i], want)
			}
		}
	}
}

func structured(id uuid.UUID) *shared.UUID_Structured {
	var u shared.UUID
	b := esdbwire.AppendUUID(nil, 1, id)
	if err := proto.Unmarshal(b[2:], &u); err != nil {
		panic(err)
	}
	return u.GetStructured()
}
