package eventstore

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

var metadataSeeds = []string{
	`{"correlationId":"o-1","causationId":"m-1","actor":"scheduler-1","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`,
	`{"correlationId":"o-1","actor":"a"}`,
	`{}`, ``, `null`, `[]`, `"x"`, `{"actor":7}`, `{"actor":"a","actor":"b"}`, `{"Actor":"a"}`,
	`{"actor":"a","other":1}`, `{"actor":"a",}`, `{"actor":"a"`, `{"actor" :"a"}`, ` {"actor":"a"}`,
	`{"actor":"a\"b"}`, `{"actor":"a\u003cb"}`, `{"actor":"é"}`, "{\"actor\":\"\xff\"}", "{\"actor\":\"a\tb\"}",
	`{"actor":"a"}x`, `{"actor":"a"}{}`, `{"actor":null}`, `{"actor":""}`, `{"correlationId":"x","actor":"a","actor":"b"}`,
	`{"actor":"a","correlationId":7}`, `{,}`, `{"actor"}`, `{"actor":}`, `{"actor":"a":"b"}`,
}

// FuzzDecodeMetadata checks decodeMetadata against json.Unmarshal, from an
// empty and from a filled struct: the same result for any input.
func FuzzDecodeMetadata(f *testing.F) {
	for _, s := range metadataSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, start := range []domain.EventMetadata{{}, {CorrelationID: "c", CausationID: "m", Actor: "a", TraceParent: "t"}} {
			want, got := start, start
			_ = json.Unmarshal(b, &want)
			decodeMetadata(b, &got)
			require.Equal(t, want, got, "%q", b)
		}
	})
}

// TestDecodeMetadataTakesTheFastPath checks that the shape saga writes is
// read without encoding/json, so that the fast path is not dead code.
func TestDecodeMetadataTakesTheFastPath(t *testing.T) {
	meta := domain.EventMetadata{CorrelationID: "o-1", CausationID: "m-1", Actor: "bench", TraceParent: "00-ab-cd-01"}
	b, err := json.Marshal(meta)
	require.NoError(t, err)
	var got domain.EventMetadata
	require.True(t, decodeMetadataFast(b, &got))
	require.Equal(t, meta, got)
	allocs := testing.AllocsPerRun(100, func() { decodeMetadata(b, &got) })
	require.LessOrEqual(t, allocs, 4.0, "one string per field")
}

// FuzzEncodeMetadata checks encodeMetadata against json.Marshal: the same
// bytes for any metadata, plain or needing escapes, one event or several.
func FuzzEncodeMetadata(f *testing.F) {
	f.Add("o-1", "m-1", "scheduler-1", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	f.Add("o-1", "", "a", "")
	f.Add("", "", "", "")
	f.Add("a<b", "a&b", "a>b", "a\"b\\c")
	f.Add("é", "\xff", "a\tb", "\u2028")
	f.Fuzz(func(t *testing.T, correlation, causation, actor, trace string) {
		metas := []domain.EventMetadata{
			{CorrelationID: correlation, CausationID: causation, Actor: actor, TraceParent: trace},
			{CorrelationID: "o-1", Actor: "a"},
			{CorrelationID: trace, CausationID: actor, Actor: causation, TraceParent: correlation},
		}
		for n := 1; n <= len(metas); n++ {
			events := make([]domain.NewEvent, n)
			for i := range events {
				events[i].Metadata = metas[i]
			}
			out := make([]LocalEvent, n)
			require.NoError(t, encodeMetadata(events, out))
			allPlain := true
			for i := range events {
				_, plain := metadataJSONSize(&events[i].Metadata)
				allPlain = allPlain && plain
			}
			for i := range events {
				want, err := json.Marshal(events[i].Metadata)
				require.NoError(t, err)
				require.Equal(t, string(want), string(out[i].Metadata))
				if allPlain {
					// Shared with the other events' JSON: appending must copy.
					require.Equal(t, len(out[i].Metadata), cap(out[i].Metadata), "each event's JSON ends its own capacity")
				}
			}
		}
	})
}

// TestEncodeMetadataTakesTheFastPath checks that the metadata saga writes is
// encoded without encoding/json, in one allocation for an append's events.
func TestEncodeMetadataTakesTheFastPath(t *testing.T) {
	meta := domain.EventMetadata{CorrelationID: "o-1", CausationID: "m-1", Actor: "bench", TraceParent: "00-ab-cd-01"}
	events := []domain.NewEvent{{Metadata: meta}, {Metadata: meta}, {Metadata: meta}}
	out := make([]LocalEvent, len(events))
	_, ok := metadataJSONSize(&meta)
	require.True(t, ok)
	allocs := testing.AllocsPerRun(100, func() { require.NoError(t, encodeMetadata(events, out)) })
	require.LessOrEqual(t, allocs, 1.0)
}

// TestEncodeMetadataKnowsEveryField: the fast path writes the four fields
// of domain.EventMetadata by hand; a fifth would be left out of every
// event silently, so this fails first and asks for it to be taught.
func TestEncodeMetadataKnowsEveryField(t *testing.T) {
	require.Equal(t, 4, reflect.TypeFor[domain.EventMetadata]().NumField(),
		"domain.EventMetadata changed: teach metadataJSONSize, appendMetadataJSON and decodeMetadata the new field")
}
