package eventstore

import (
	"encoding/json"
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
