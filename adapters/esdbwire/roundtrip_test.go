package esdbwire_test

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"google.golang.org/grpc/mem"

	"github.com/sagaengine/saga/adapters/esdbwire"
	"github.com/sagaengine/saga/domain"
)

// TestClientRequestsReadByServer: what the client encodes, the server's
// decoder reads as the same append, chunk by chunk.
func TestClientRequestsReadByServer(t *testing.T) {
	id := uuid.New()
	big := bytes.Repeat([]byte("y"), maxChunk-200)
	events := []esdb.EventData{
		{EventID: uuid.New(), EventType: "A", ContentType: esdb.ContentTypeJson, Data: []byte(`{"a":1}`), Metadata: []byte(`{"m":1}`)},
		{EventID: uuid.New(), EventType: "B", ContentType: esdb.ContentTypeBinary, Data: big},
	}
	frames := esdbwire.AppendRequests(id, "orders-7", domain.ExpectRevision(41), events, time.Now().Add(time.Second), maxChunk)
	if len(frames) != 2 {
		t.Fatalf("%d requests, want 2", len(frames))
	}
	var got []esdbwire.Event
	for i := range frames {
		var r esdbwire.Request
		if err := esdbwire.NewCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(frames[i].B)}, &r); err != nil {
			t.Fatal(err)
		}
		if r.CorrErr != nil || uuid.UUID(r.CorrID) != id {
			t.Fatalf("request %d: correlation id %v, %v", i, uuid.UUID(r.CorrID), r.CorrErr)
		}
		if r.HasOpts != (i == 0) || r.IsFinal != (i == len(frames)-1) {
			t.Fatalf("request %d: options %v, final %v", i, r.HasOpts, r.IsFinal)
		}
		if i == 0 && (r.Opts.Stream != "orders-7" || r.Opts.ExpectedField != esdbwire.ExpectStreamPosition || r.Opts.Revision != 41) {
			t.Fatalf("options %+v", r.Opts)
		}
		got = append(got, r.Events...)
	}
	for i, e := range events {
		ct := "application/json"
		if e.ContentType == esdb.ContentTypeBinary {
			ct = "application/octet-stream"
		}
		g := got[i]
		if g.Err != nil || uuid.UUID(g.ID) != e.EventID || g.Type != e.EventType || g.ContentType != ct ||
			!bytes.Equal(g.Data, e.Data) || !bytes.Equal(g.Custom, e.Metadata) {
			t.Fatalf("event %d read as %+v", i, g)
		}
	}
}

// TestServerAnswersReadByClient: what the server encodes, the client's
// decoder reads by hand as the same result.
func TestServerAnswersReadByClient(t *testing.T) {
	id := uuid.New()
	corr := esdbwire.AppendUUID(nil, 1, id)
	corr = corr[2:] // the UUID message, without its field tag and length
	for _, a := range []esdbwire.Answer{
		{Corr: corr, Stream: "s", ExpectedField: esdbwire.ExpectStreamPosition, Revision: 3, CurrentRevision: 4, Commit: 900, Prepare: 800},
		{Corr: corr, Stream: "s", ExpectedField: esdbwire.ExpectNoStream, CurrentRevision: 0, Commit: 10, Prepare: 10},
	} {
		var r esdbwire.Reply
		if err := esdbwire.NewCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(a.Encode())}, &r); err != nil {
			t.Fatal(err)
		}
		if r.Full != nil || r.Corr != id || r.Revision != a.CurrentRevision || r.Commit != a.Commit || r.Prepare != a.Prepare {
			t.Fatalf("answer %+v read as %+v", a, r)
		}
	}
}

// TestCodecDecodesAMessageSplitAcrossBuffers: gRPC may hand a message over in
// several buffers; it decodes as it does in one.
func TestCodecDecodesAMessageSplitAcrossBuffers(t *testing.T) {
	events := []esdb.EventData{{EventID: uuid.New(), EventType: "A", ContentType: esdb.ContentTypeJson, Data: []byte(`{"a":1}`), Metadata: []byte(`{"m":1}`)}}
	frames := esdbwire.AppendRequests(uuid.New(), "orders-8", domain.ExpectRevision(3), events, time.Now().Add(time.Second), maxChunk)
	b := frames[0].B
	var whole, split esdbwire.Request
	if err := esdbwire.NewCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &whole); err != nil {
		t.Fatal(err)
	}
	third := len(b) / 3
	parts := mem.BufferSlice{mem.SliceBuffer(b[:third]), mem.SliceBuffer(b[third : 2*third]), mem.SliceBuffer(b[2*third:])}
	if err := esdbwire.NewCodec().Unmarshal(parts, &split); err != nil {
		t.Fatal(err)
	}
	if len(whole.Events) != 1 || whole.Opts.Stream != "orders-8" {
		t.Fatalf("whole message read as %+v", whole)
	}
	if !reflect.DeepEqual(whole, split) {
		t.Fatalf("split message read as %+v, want %+v", split, whole)
	}
}
