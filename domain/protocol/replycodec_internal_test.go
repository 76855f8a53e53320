package protocol

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/sagaengine/saga/domain"
)

// The hand-written reply codec must give exactly what encoding/json gives:
// the reply's JSON is a wire contract other agents' languages read and write.

var (
	replyStrings = []string{"", "o-1", "payment", "succeeded", "failed", "a b", "x<y", "a&b", `q"t`, `back\slash`, "line\nfeed",
		"tab\t", "\x01", "é", "日本", "\u2028", "\xff", "p-1/payment", strings.Repeat("z", 300)}
	replyResults = []string{"", `{}`, `{"paymentId":"p-1"}`, `{"a":[1,2,{"b":null}],"c":true}`, `[1,2]`, `"s"`, `{ "a" : 1 }`,
		"{\"a\":\n1}", `{"h":"<b>"}`, `{"e":"é"}`, `{"q":"a\"b\\c"}`, `{`, `{"a":}`, `1`, `null`, `true`, `{"u":"\u2028"}`}
)

func randomReply(rng *rand.Rand) StepReply {
	s := func() string { return replyStrings[rng.IntN(len(replyStrings))] }
	ints := []int{0, 1, 2, 7, -1, 1 << 40, -(1 << 40)}
	r := StepReply{TaskID: s(), Step: s(), Action: s(), Attempt: ints[rng.IntN(len(ints))], Outcome: s(),
		Failure: domain.FailureKind(s()), Reason: s(), Agent: s(), Instance: s(), Tries: ints[rng.IntN(len(ints))], Target: s(),
		TraceParent: s()}
	if res := replyResults[rng.IntN(len(replyResults))]; res != "" {
		r.Result = json.RawMessage(res)
	}
	return r
}

func TestAppendStepReplyEncodesAsJSONMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		r := randomReply(rng)
		want, wantErr := json.Marshal(r)
		got, gotErr := AppendStepReply([]byte("prefix"), r)
		if (wantErr != nil) != (gotErr != nil) {
			t.Fatalf("%+v: json.Marshal error %v, AppendStepReply error %v", r, wantErr, gotErr)
		}
		if wantErr == nil && !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("%+v:\n json.Marshal     %s\n AppendStepReply %s", r, want, got)
		}
	}
}

// checkParsedAsUnmarshal fails unless the plain decoder either declines
// body or reads it as json.Unmarshal does.
func checkParsedAsUnmarshal(t *testing.T, body []byte) bool {
	t.Helper()
	got, ok := parseStepReplyPlain(body)
	if !ok {
		return false
	}
	var want StepReply
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatalf("the plain decoder accepted %q, json.Unmarshal refuses it: %v", body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n json.Unmarshal %+v\n plain decoder  %+v", body, want, got)
	}
	return true
}

func TestParseStepReplyPlainDecodesAsJSONUnmarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	plain := 0
	for i := 0; i < 20000; i++ {
		body, err := json.Marshal(randomReply(rng))
		if err != nil {
			continue
		}
		if checkParsedAsUnmarshal(t, body) {
			plain++
		}
		// Mutations: every prefix-truncation point near the end, a byte
		// changed, whitespace, a key renamed or repeated.
		cut := rng.IntN(len(body))
		checkParsedAsUnmarshal(t, body[:cut])
		changed := bytes.Clone(body)
		changed[rng.IntN(len(changed))] = []byte(`{}[]",: 0-a\e`)[rng.IntN(13)]
		checkParsedAsUnmarshal(t, changed)
		checkParsedAsUnmarshal(t, bytes.Replace(body, []byte(`,`), []byte(` ,`), 1))
		checkParsedAsUnmarshal(t, bytes.Replace(body, []byte(`"taskId"`), []byte(`"TaskId"`), 1))
		checkParsedAsUnmarshal(t, bytes.Replace(body, []byte(`{`), []byte(`{"step":"x",`), 1))
	}
	for _, body := range []string{`{}`, `{"taskId":"t","attempt":01}`, `{"taskId":"t","attempt":1.0}`, `{"attempt":99999999999999999999}`,
		`{"attempt":-0}`, `{"result":null}`, `{"result":1}`, `{"taskId":null}`, `{"taskId":"t",}`, `{,}`, `{"taskId":"t"}x`,
		`{"result":{"a":"}"}}`, `{"result":["\"]"]}`, `{"tries":-}`, `{"other":1}`, `{"-":"x"}`} {
		checkParsedAsUnmarshal(t, []byte(body))
	}
	for i := 0; i < 100; i++ {
		r := randomReply(rng)
		r.TaskID, r.Step, r.Reason, r.Result = "o-1", "payment", "no", json.RawMessage(`{"a":[1,{"b":"c"}]}`)
		if body, err := json.Marshal(r); err == nil && bytes.IndexFunc(body, func(c rune) bool { return c == '\\' || c >= 0x7f }) < 0 &&
			!bytes.Contains(body, []byte(`\u`)) && checkParsedAsUnmarshal(t, body) {
			plain++
		}
	}
	if plain == 0 {
		t.Fatalf("the plain decoder read only %d of the encoded replies", plain)
	}
}

func FuzzParseStepReplyPlain(f *testing.F) {
	f.Add([]byte(`{"taskId":"o-1","step":"s","action":"execute","attempt":1,"outcome":"succeeded","result":{"a":[1]},"tries":1}`))
	f.Add([]byte(`{"taskId":"o-1","step":"s","attempt":1,"outcome":"failed","failure":"permanent","reason":"no"}`))
	f.Fuzz(func(t *testing.T, body []byte) { checkParsedAsUnmarshal(t, body) })
}

func TestAppendStepReplyAllocatesNothingIntoRoom(t *testing.T) {
	r := StepReply{TaskID: "o-1", Step: "payment", Action: ActionExecute, Attempt: 1, Outcome: OutcomeSucceeded,
		Agent: "payment", Result: json.RawMessage(`{"paymentId":"p-1"}`), Instance: "host-1-abc/payment", Tries: 1}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { _, _ = AppendStepReply(buf[:0], r) }); n != 0 {
		t.Fatalf("AppendStepReply allocated %v times a reply", n)
	}
	body, _ := json.Marshal(r)
	// One string for each of the six string fields, the result, and the
	// validity check of the result (json.Unmarshal takes about 20).
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseStepReply(body) }); n > 8 {
		t.Fatalf("ParseStepReply allocated %v times a reply", n)
	}
}
