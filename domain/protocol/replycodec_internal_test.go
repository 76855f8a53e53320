package protocol

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

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

// checkEncodesAsMarshal fails unless appendJSON appends to a buffer what
// json.Marshal gives for v, and fails exactly when json.Marshal does.
func checkEncodesAsMarshal[T any](t *testing.T, v T, appendJSON func([]byte, T) ([]byte, error)) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	got, gotErr := appendJSON([]byte("prefix"), v)
	if (wantErr != nil) != (gotErr != nil) {
		t.Fatalf("%+v: json.Marshal error %v, the encoder's %v", v, wantErr, gotErr)
	}
	if wantErr == nil && !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Fatalf("%+v:\n json.Marshal %s\n the encoder  %s", v, want, got)
	}
}

func TestAppendStepReplyEncodesAsJSONMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		r := randomReply(rng)
		checkEncodesAsMarshal(t, r, AppendStepReply)
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

func randomCommand(rng *rand.Rand, strs, results []string) ExecuteStep {
	s := func() string { return strs[rng.IntN(len(strs))] }
	raw := func() json.RawMessage {
		if res := results[rng.IntN(len(results))]; res != "" {
			return json.RawMessage(res)
		}
		return nil
	}
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+30*60), time.FixedZone("y", -8*3600), time.FixedZone("s", 45),
		time.FixedZone("far", 30*3600)}
	times := []time.Time{{}, time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 120000000, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := ExecuteStep{TaskID: s(), Workflow: s(), Step: s(), Agent: s(), Action: s(), Compensation: s(), Attempt: rng.IntN(5) - 1,
		CompleteBy: times[rng.IntN(len(times))].In(zones[rng.IntN(len(zones))]), IdempotencyKey: s(), WorkflowVersion: rng.IntN(3),
		Order: raw(), Result: raw(), Priority: domain.Priority(s()), TraceParent: s(), Route: &Route{Instance: s()}}
	if n := rng.IntN(4); n > 0 {
		c.Results = map[string]json.RawMessage{}
		for range n {
			c.Results[s()] = raw()
		}
	}
	if rng.IntN(2) == 0 {
		c.HTTP = &domain.HTTPCall{Method: "POST", URL: "http://svc/" + s() + "?a=1&b=<2>", Headers: map[string]string{"X": s()}, Body: raw(),
			TransientStatus: []int{409}}
	}
	return c
}

func TestAppendExecuteStepEncodesAsJSONMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	// Commands of plain fields, which take the fast path, then of any.
	plainStrings, plainResults := []string{"", "o-1", "payment", "a b"}, []string{"", `{}`, `{"paymentId":"p-1"}`, `[1,{"a":null}]`}
	for i := 0; i < 40000; i++ {
		c := randomCommand(rng, replyStrings, replyResults)
		if i%2 == 0 {
			c = randomCommand(rng, plainStrings, plainResults)
		}
		checkEncodesAsMarshal(t, c, AppendExecuteStep)
	}
}

func TestAppendExecuteStepAllocatesOnlyForTheHTTPCall(t *testing.T) {
	c := ExecuteStep{TaskID: "o-1", Workflow: "order", Step: "payment", Agent: "payment", Action: ActionExecute, Attempt: 1,
		CompleteBy: time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC), IdempotencyKey: "o-1/payment", Order: json.RawMessage(`{"orderId":"o-1"}`),
		Results: map[string]json.RawMessage{"inventory": json.RawMessage(`{"reserved":true}`)}}
	buf := make([]byte, 0, 1024)
	// The sorted list of the results' steps.
	if n := testing.AllocsPerRun(100, func() { _, _ = AppendExecuteStep(buf[:0], c) }); n > 1 {
		t.Fatalf("AppendExecuteStep allocated %v times a command", n)
	}
}
