package esdbwire

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// FuzzBatchRequestDecode: the hand decoder of BatchAppend requests reads
// every encoding protobuf accepts as protobuf does, and refuses what
// protobuf refuses.
func FuzzBatchRequestDecode(f *testing.F) {
	id := &shared.UUID{Value: &shared.UUID_Structured_{Structured: &shared.UUID_Structured{MostSignificantBits: -5, LeastSignificantBits: 7}}}
	corr := &shared.UUID{Value: &shared.UUID_String_{String_: "1c5e9a3e-9a4b-4f6e-8d2a-2b1f7d0c9e12"}}
	ev := &streams.BatchAppendReq_ProposedMessage{Id: id, Metadata: map[string]string{"type": "E", "content-type": "application/json", "x": "y"},
		CustomMetadata: []byte("m"), Data: []byte(`{}`)}
	for _, m := range []*streams.BatchAppendReq{
		{CorrelationId: corr, IsFinal: true, ProposedMessages: []*streams.BatchAppendReq_ProposedMessage{ev, ev}, Options: &streams.BatchAppendReq_Options{
			StreamIdentifier:       &shared.StreamIdentifier{StreamName: []byte("s")},
			ExpectedStreamPosition: &streams.BatchAppendReq_Options_StreamPosition{StreamPosition: 3},
			DeadlineOption:         &streams.BatchAppendReq_Options_Deadline_21_10_0{Deadline_21_10_0: timestamppb.New(time.Unix(5, 6))},
		}},
		{CorrelationId: id, Options: &streams.BatchAppendReq_Options{ExpectedStreamPosition: &streams.BatchAppendReq_Options_NoStream{}}},
		{},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(b, b...))
	}
	// The requests as KurrentDB's own protos encode them, every version.
	golden, err := filepath.Glob(filepath.Join("testdata", "kurrentdb", "golden", "*", "batch_req_*.bin"))
	if err != nil || len(golden) == 0 {
		f.Fatalf("golden requests: %v (%d)", err, len(golden))
	}
	for _, name := range golden {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m streams.BatchAppendReq
		perr := proto.Unmarshal(data, &m)
		var got Request
		err := got.UnmarshalWire(data)
		if (err != nil) != (perr != nil) {
			t.Fatalf("hand decoder error %v, protobuf's %v", err, perr)
		}
		if err != nil {
			return
		}
		var want Request
		want.fromProto(&m)
		if !sameRequest(&got, &want) {
			t.Fatalf("hand decoder read %+v, protobuf %+v", got, want)
		}
	})
}

// sameRequest compares what BatchAppend uses of two requests.
func sameRequest(a, b *Request) bool {
	var ua, ub shared.UUID
	if proto.Unmarshal(a.Corr.Bytes(), &ua) != nil || proto.Unmarshal(b.Corr.Bytes(), &ub) != nil || !proto.Equal(&ua, &ub) {
		return false
	}
	if a.CorrID != b.CorrID || fmt.Sprint(a.CorrErr) != fmt.Sprint(b.CorrErr) || a.IsFinal != b.IsFinal || a.HasOpts != b.HasOpts {
		return false
	}
	if a.HasOpts && (a.Opts.Stream != b.Opts.Stream || a.Opts.ExpectedField != b.Opts.ExpectedField || a.Opts.Revision != b.Opts.Revision ||
		a.Opts.HasDeadline != b.Opts.HasDeadline || !a.Opts.Deadline.Equal(b.Opts.Deadline)) {
		return false
	}
	if len(a.Events) != len(b.Events) {
		return false
	}
	for i := range a.Events {
		x, y := a.Events[i], b.Events[i]
		if x.ID != y.ID || fmt.Sprint(x.Err) != fmt.Sprint(y.Err) || x.Type != y.Type || x.ContentType != y.ContentType ||
			!bytes.Equal(x.Custom, y.Custom) || !bytes.Equal(x.Data, y.Data) {
			return false
		}
	}
	return true
}
