package eventstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sagaengine/saga/adapters/esdbwire"
	"github.com/sagaengine/saga/domain"
)

// goldenDir holds frames encoded by protoc from KurrentDB's own .proto
// files, one directory per version (see its README).
const goldenDir = "../esdbwire/testdata/kurrentdb/golden"

// goldenVersions are the versions the frames were encoded for; "future" is
// 25.1 with fields added, as a newer server might send.
var goldenVersions = []string{"23.10", "24.10", "25.1", "future"}

// goldenRecorded are the records the golden ReadResp frames carry.
var goldenRecorded = map[string]domain.RecordedEvent{
	"saga": {
		ID: "0b0e3a4c-5d6e-4f70-8192-a3b4c5d6e7f8", Stream: "task-o-1", Type: "StepSucceeded",
		Revision: 3, Position: 4096, Recorded: time.Unix(1764115200, 0).UTC(), Data: []byte(`{"n":1}`),
		Metadata: domain.EventMetadata{CorrelationID: "o-1", CausationID: "m-1", Actor: "agent-7"},
	},
	"foreign": {
		ID: "f1e2d3c4-b5a6-4978-8a6b-5c4d3e2f1a0b", Stream: "billing-42", Type: "InvoiceIssued",
		Revision: 0, Position: 5120, Recorded: time.Unix(0, 17641152001234567*100).UTC(), Data: []byte{1, 2, 3},
	},
	"legacy": {
		ID: "11111111-2222-4333-8444-555555555555", Stream: "task-legacy", Type: "StepFailed",
		Revision: 1, Position: 7000, Recorded: time.Unix(1764115200, 0).UTC(), Data: []byte(`{}`),
	},
	"link": {
		ID: "f1e2d3c4-b5a6-4978-8a6b-5c4d3e2f1a0b", Stream: "$ce-task", Type: "$>",
		Revision: 0, Position: 9800, Recorded: time.Unix(1764115201, 0).UTC(), Data: []byte("3@task-o-1"),
	},
	"orphan link": {
		ID: "11111111-2222-4333-8444-555555555555", Stream: "$ce-task", Type: "$>",
		Revision: 1, Position: 9900, Recorded: time.Unix(1764115203, 0).UTC(), Data: []byte("0@task-gone"),
	},
	"system": {
		ID: "11111111-2222-4333-8444-555555555555", Stream: "$$task-o-1", Type: "$metadata",
		Revision: 0, Position: 9500, Recorded: time.Unix(1764115202, 0).UTC(), Data: []byte(`{"$maxAge":3600}`),
	},
}

// leanExpected is what the lean reader makes of a golden ReadResp: its
// kind and, for an event, the record (a key of goldenRecorded) and its
// prepare position.
type leanExpected struct {
	kind    readRespKind
	record  string
	prepare uint64
}

var goldenReadResp = map[string]leanExpected{
	"read_confirmation":             {kind: respConfirmation},
	"read_event_structured":         {kind: respEvent, record: "saga", prepare: 4096},
	"read_event_string_uuid":        {kind: respEvent, record: "foreign", prepare: 5120},
	"read_event_legacy_transaction": {kind: respEvent, record: "legacy", prepare: 6000},
	"read_event_resolved_link":      {kind: respEvent, record: "link", prepare: 9800},
	"read_event_link_to_deleted":    {kind: respEvent, record: "orphan link", prepare: 9900},
	"read_event_system":             {kind: respEvent, record: "system", prepare: 9500},
	"read_event_no_position":        {kind: respEvent, record: "saga", prepare: 4096},
	"read_event_future_fields":      {kind: respEvent, record: "saga", prepare: 4096},
	"read_checkpoint":               {kind: respOther},
	"read_checkpoint_timestamp":     {kind: respOther},
	"read_stream_not_found":         {kind: respOther},
	"read_first_stream_position":    {kind: respOther},
	"read_last_stream_position":     {kind: respOther},
	"read_last_all_stream_position": {kind: respOther},
	"read_caught_up_empty":          {kind: respCaughtUp},
	"read_caught_up_all":            {kind: respCaughtUp},
	"read_caught_up_stream":         {kind: respCaughtUp},
	"read_fell_behind_empty":        {kind: respOther},
	"read_fell_behind_all":          {kind: respOther},
	"read_future_kind":              {kind: respOther},
}

// TestLeanReaderReadsKurrentDBsFrames decodes every ReadResp frame of
// every version, each kind of answer KurrentDB sends (those saga's server
// never sends included: checkpoints, fell-behind, stream positions,
// resolved links, string ids) and fields a newer server might add, with
// the lean reader: each reads as the official client's types read it, an
// event as fromRecorded makes it of the record at that place in $all.
func TestLeanReaderReadsKurrentDBsFrames(t *testing.T) {
	seen := map[string]bool{}
	for _, version := range goldenVersions {
		files, err := filepath.Glob(filepath.Join(goldenDir, version, "read_*.bin"))
		require.NoError(t, err)
		require.NotEmpty(t, files, version)
		for _, file := range files {
			name := strings.TrimSuffix(filepath.Base(file), ".bin")
			t.Run(version+"/"+name, func(t *testing.T) {
				want, ok := goldenReadResp[name]
				require.True(t, ok, "no expectation for frame %s", name)
				seen[name] = true
				frame, err := os.ReadFile(file)
				require.NoError(t, err)
				// The official client's types (those saga's server uses)
				// read the frame too.
				require.NoError(t, proto.Unmarshal(frame, &streams.ReadResp{}))

				var got readResp
				require.NoError(t, decodeReadResp(frame, &got))
				assert.Equal(t, want.kind, got.kind)
				if want.kind != respEvent {
					return
				}
				assert.Equal(t, goldenRecorded[want.record], got.event)
				assert.Equal(t, want.prepare, got.prepare)
			})
		}
	}
	for name := range goldenReadResp {
		assert.True(t, seen[name], "frame %s is in no version's directory", name)
	}
}

// TestAppendAnswersOfKurrentDB reads every BatchAppend answer frame of every
// version as an append's outcome: the official client's WriteResult, or its
// error for a wrong expected version and for an append over the maximum
// size (which Append reports as MaximumAppendSizeExceeded).
func TestAppendAnswersOfKurrentDB(t *testing.T) {
	type outcome struct {
		result *esdb.WriteResult
		code   esdb.ErrorCode
		text   string
	}
	want := map[string]outcome{
		"batch_resp_success":                {result: &esdb.WriteResult{NextExpectedVersion: 4, CommitPosition: 20480, PreparePosition: 20480}},
		"batch_resp_success_string_uuid":    {result: &esdb.WriteResult{NextExpectedVersion: 0, CommitPosition: 30000, PreparePosition: 29000}},
		"batch_resp_success_no_position":    {result: &esdb.WriteResult{NextExpectedVersion: 7}},
		"batch_resp_future_fields":          {result: &esdb.WriteResult{NextExpectedVersion: 4, CommitPosition: 20480, PreparePosition: 20480}},
		"batch_resp_wrong_expected_version": {code: esdb.ErrorCodeWrongExpectedVersion, text: "expecting '3' but got '5'"},
		"batch_resp_max_append_size":        {code: esdb.ErrorCodeUnknown, text: esdbwire.MaxAppendSizeMessage(1 << 20)},
	}
	for _, version := range goldenVersions {
		files, err := filepath.Glob(filepath.Join(goldenDir, version, "batch_resp_*.bin"))
		require.NoError(t, err)
		require.NotEmpty(t, files, version)
		for _, file := range files {
			name := strings.TrimSuffix(filepath.Base(file), ".bin")
			t.Run(version+"/"+name, func(t *testing.T) {
				w, ok := want[name]
				require.True(t, ok, "no expectation for frame %s", name)
				frame, err := os.ReadFile(file)
				require.NoError(t, err)
				var r esdbwire.Reply
				require.NoError(t, r.UnmarshalWire(frame))
				res, err := replyResult(&r)
				if w.result != nil {
					require.NoError(t, err)
					assert.Equal(t, *w.result, res)
					return
				}
				var ae *appendError
				require.ErrorAs(t, err, &ae)
				assert.Equal(t, w.code, ae.code)
				assert.Contains(t, err.Error(), w.text)
			})
		}
	}
}
