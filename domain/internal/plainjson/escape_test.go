package plainjson_test

import (
	"encoding/json"
	"testing"

	"github.com/sagaengine/saga/domain/internal/plainjson"
)

// checkWritesAsMarshal fails unless w (written from a prefix) holds what
// json.Marshal gives for v, or w refused what json.Marshal refuses.
func checkWritesAsMarshal(t *testing.T, v any, write func(w *plainjson.Writer)) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	w := plainjson.NewWriter([]byte("p"))
	write(&w)
	if wantErr != nil || !w.OK() {
		if (wantErr != nil) == w.OK() {
			t.Fatalf("%q: json.Marshal error %v, the writer's ok %v", v, wantErr, w.OK())
		}
		return
	}
	if got := string(w.Bytes()[1:]); got != string(want) {
		t.Fatalf("%q:\n json.Marshal %s\n the writer   %s", v, want, got)
	}
}

// TestEscapedWritesStringsAsJSONMarshal: every byte alone and after a
// plain one, every rune of the first planes and the edges of UTF-8.
func TestEscapedWritesStringsAsJSONMarshal(t *testing.T) {
	var ss []string
	for b := range 256 {
		ss = append(ss, string([]byte{byte(b)}), "a"+string([]byte{byte(b)})+"z")
	}
	for r := rune(0); r < 0x3000; r++ {
		ss = append(ss, string(r), "x"+string(r))
	}
	ss = append(ss, "\U0010FFFF", "\xed\xa0\x80", "\xc3", "\xe2\x80", "\xe2\x80\xa8\xe2\x80\xa9", "\xf4\x90\x80\x80", "😀<>&\"\\/",
		"\u2027\u202a", "", "plain")
	for _, s := range ss {
		checkWritesAsMarshal(t, s, func(w *plainjson.Writer) { w.Escaped(s) })
	}
}

// TestRawValueWritesAsJSONMarshal: raw values are validated, compacted and
// HTML-escaped as json.Marshal writes a json.RawMessage.
func TestRawValueWritesAsJSONMarshal(t *testing.T) {
	raws := append([]string{"\"<>&\u2028\u2029\"", ` { "<a>" : [ "&", "\u2028" , 1 ] } `, `"\"<\\"`, `"\\\u2028"`, "\"\xe2\x80\"",
		"\"\xe2\x80\xa8", "\t\n\r\"x\"\r\n", `"a\u003cb"`}, validSeeds...)
	for _, raw := range raws {
		m := json.RawMessage(raw)
		checkWritesAsMarshal(t, m, func(w *plainjson.Writer) { w.RawValue(m) })
	}
	checkWritesAsMarshal(t, json.RawMessage(nil), func(w *plainjson.Writer) { w.RawValue(nil) })
}
