package esdbwire

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// The golden frames are encoded by protoc from KurrentDB's own .proto files
// of each version (testdata/kurrentdb/README.md); "future" is 25.1 with
// fields added, as a newer server or client might send.
var goldenVersions = []string{"23.10", "24.10", "25.1", "future"}

// goldenFrames returns the frames of every version whose names start with
// prefix, by "version/name".
func goldenFrames(t *testing.T, prefix string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, v := range goldenVersions {
		files, err := filepath.Glob(filepath.Join("testdata", "kurrentdb", "golden", v, prefix+"*.bin"))
		require.NoError(t, err)
		require.NotEmpty(t, files, v)
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			out[v+"/"+strings.TrimSuffix(filepath.Base(f), ".bin")] = b
		}
	}
	return out
}

func frameName(key string) string { return key[strings.IndexByte(key, '/')+1:] }

// TestServerReadsKurrentDBClientsRequests decodes BatchAppend requests as
// the official clients send them (ids in string form as the .NET client
// sends them, or structured; either deadline) with the server's decoder:
// each reads as expected and as protobuf reads it.
func TestServerReadsKurrentDBClientsRequests(t *testing.T) {
	corr := uuid.MustParse("0b0e3a4c-5d6e-4f70-8192-a3b4c5d6e7f8")
	want := map[string]Request{
		"batch_req_string_uuids": {
			CorrID: corr, HasOpts: true, IsFinal: true,
			Opts: Options{Stream: "task-o-1", ExpectedField: ExpectStreamPosition, Revision: 3},
			Events: []Event{
				{ID: uuid.MustParse("f1e2d3c4-b5a6-4978-8a6b-5c4d3e2f1a0b"), Type: "StepSucceeded", ContentType: "application/json",
					Custom: []byte(`{"correlationId":"o-1"}`), Data: []byte(`{"n":1}`)},
				{ID: uuid.MustParse("11111111-2222-4333-8444-555555555555"), Type: "StepFailed", ContentType: "application/octet-stream",
					Data: []byte{0, 1}},
			},
		},
		"batch_req_structured": {
			CorrID: corr, HasOpts: true, IsFinal: true,
			Opts: Options{Stream: "task-o-1", ExpectedField: ExpectNoStream, HasDeadline: true, Deadline: time.Unix(1764115210, 5).UTC()},
			Events: []Event{
				{ID: uuid.MustParse("f1e2d3c4-b5a6-4978-8a6b-5c4d3e2f1a0b"), Type: "OrderPlaced", ContentType: "application/json", Data: []byte(`{}`)},
			},
		},
	}
	for key, frame := range goldenFrames(t, "batch_req_") {
		t.Run(key, func(t *testing.T) {
			w, ok := want[frameName(key)]
			require.True(t, ok, "no expectation for %s", key)
			var got Request
			require.NoError(t, got.UnmarshalWire(frame))
			w.Corr = got.Corr // as sent: compared through sameRequest below
			assert.True(t, sameRequest(&w, &got), "got %+v", got)
			var m streams.BatchAppendReq
			require.NoError(t, proto.Unmarshal(frame, &m))
			var viaProto Request
			viaProto.fromProto(&m)
			assert.True(t, sameRequest(&viaProto, &got), "protobuf reads %+v", viaProto)
		})
	}
}

// TestClientReadsKurrentDBAnswers decodes BatchAppend answers as KurrentDB
// sends them (successes with the correlation id in either form, with and
// without a position, errors with their details, and fields a newer
// server might add) with the client's decoder: the correlation id and the
// outcome read as protobuf reads them.
func TestClientReadsKurrentDBAnswers(t *testing.T) {
	type outcome struct {
		corr                      string
		revision, commit, prepare uint64
		noStream                  bool
		errorCode                 int32
	}
	structured, str := "0b0e3a4c-5d6e-4f70-8192-a3b4c5d6e7f8", "f1e2d3c4-b5a6-4978-8a6b-5c4d3e2f1a0b"
	want := map[string]outcome{
		"batch_resp_success":                {corr: structured, revision: 4, commit: 20480, prepare: 20480},
		"batch_resp_success_string_uuid":    {corr: str, revision: 0, commit: 30000, prepare: 29000},
		"batch_resp_success_no_position":    {corr: structured, revision: 7},
		"batch_resp_future_fields":          {corr: structured, revision: 4, commit: 20480, prepare: 20480},
		"batch_resp_wrong_expected_version": {corr: structured, errorCode: 9},
		"batch_resp_max_append_size":        {corr: str, errorCode: 3},
	}
	for key, frame := range goldenFrames(t, "batch_resp_") {
		t.Run(key, func(t *testing.T) {
			w, ok := want[frameName(key)]
			require.True(t, ok, "no expectation for %s", key)
			var r Reply
			require.NoError(t, r.UnmarshalWire(frame))
			var got outcome
			got.corr = r.Corr.String()
			if r.Full == nil {
				got.revision, got.noStream, got.commit, got.prepare = r.Revision, r.NoStream, r.Commit, r.Prepare
			} else if s := r.Full.GetSuccess(); s != nil {
				got.revision, got.noStream = s.GetCurrentRevision(), s.GetNoStream() != nil
				got.commit, got.prepare = s.GetPosition().GetCommitPosition(), s.GetPosition().GetPreparePosition()
			} else {
				got.errorCode = r.Full.GetError().GetCode()
				require.NotEmpty(t, r.Full.GetError().GetDetails())
			}
			assert.Equal(t, w, got)
		})
	}
}

// TestCaughtUpIsKurrentDBs: the caught-up answer the embedded server sends
// has the bytes KurrentDB 24.10's and 25.1's protos give it, for a
// subscription to $all and to a stream.
func TestCaughtUpIsKurrentDBs(t *testing.T) {
	at := time.Unix(1764115200, 250000000)
	all := CaughtUp{Time: at, Commit: 12500, Prepare: 12490, HasPosition: true}
	stream := CaughtUp{Time: at, Revision: 9, HasRevision: true}
	frames := goldenFrames(t, "read_caught_up_")
	for _, v := range []string{"24.10", "25.1"} {
		assert.True(t, bytes.Equal(frames[v+"/read_caught_up_all"], all.Encode()), v)
		assert.True(t, bytes.Equal(frames[v+"/read_caught_up_stream"], stream.Encode()), v)
	}
	// Clients of 23.10's protocol read it as the empty CaughtUp they know.
	var m streams.ReadResp
	require.NoError(t, proto.Unmarshal(all.Encode(), &m))
	require.NotNil(t, m.GetCaughtUp())
}
