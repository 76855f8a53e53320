package protocol

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/sagaengine/saga/domain"
)

// The reflection-free decoders of commands and statuses must read exactly
// what the strict reflection path reads, and decline the rest.

// strictExecuteStep is ParseExecuteStep without its fast path.
func strictExecuteStep(body []byte) (ExecuteStep, error) {
	var c ExecuteStep
	if err := strictDecode(body, &c); err != nil {
		return c, invalidf("command: %v", err)
	}
	return c, validExecuteStep(c)
}

// strictTaskStatus is ParseTaskStatus without its fast path.
func strictTaskStatus(body []byte) (TaskStatus, error) {
	var s TaskStatus
	if err := strictDecode(body, &s); err != nil {
		return s, invalidf("status: %v", err)
	}
	if s.OrderID == "" || s.Status == "" {
		return s, invalidf("status lacks orderId or status")
	}
	return s, nil
}

// checkParsedAsStrict fails unless fast either declines body or reads it as
// strict does, and unless the parser as a whole (parse) gives what strict
// gives: the same value, and an error exactly when strict gives one, with
// the same text. It reports whether fast read body.
func checkParsedAsStrict[T any](t *testing.T, body []byte, fast func([]byte) (T, bool), parse, strict func([]byte) (T, error)) bool {
	t.Helper()
	want, wantErr := strict(body)
	got, gotErr := parse(body)
	if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
		t.Fatalf("%q: strict error %v, parser error %v", body, wantErr, gotErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n strict %+v\n parser %+v", body, want, got)
	}
	decoded, ok := fast(body)
	if !ok {
		return false
	}
	var ref T
	if err := strictDecode(body, &ref); err != nil {
		t.Fatalf("the plain decoder accepted %q, the strict decoder refuses it: %v", body, err)
	}
	if !reflect.DeepEqual(decoded, ref) {
		t.Fatalf("%q:\n strict decoder %+v\n plain decoder  %+v", body, ref, decoded)
	}
	return true
}

func checkCommand(t *testing.T, body []byte) bool {
	t.Helper()
	return checkParsedAsStrict(t, body, parseExecuteStepPlain, ParseExecuteStep, strictExecuteStep)
}

func checkStatus(t *testing.T, body []byte) bool {
	t.Helper()
	return checkParsedAsStrict(t, body, parseTaskStatusPlain, ParseTaskStatus, strictTaskStatus)
}

// mutations are body changed in the ways the plain decoders must notice:
// cut short, a byte changed, whitespace, a member renamed, repeated or
// added.
func mutations(rng *rand.Rand, body []byte) [][]byte {
	if len(body) == 0 {
		return nil
	}
	changed := bytes.Clone(body)
	changed[rng.IntN(len(changed))] = []byte(`{}[]",: 0-a\en`)[rng.IntN(14)]
	first := bytes.IndexByte(body, ':')
	return [][]byte{
		body[:rng.IntN(len(body))],
		changed,
		bytes.Replace(body, []byte(`,`), []byte(" \n,\t"), 1),
		bytes.Replace(body, []byte(`"taskId"`), []byte(`"TaskId"`), 1),
		bytes.Replace(body, []byte(`"orderId"`), []byte(`"orderID"`), 1),
		bytes.Replace(body, []byte(`{`), append(bytes.Clone(body[:first+1]), `"x",`...), 1),
		bytes.Replace(body, []byte(`{`), []byte(`{"results":{"a":1},`), 1),
		bytes.Replace(body, []byte(`{`), []byte(`{"http":{"url":"u"},`), 1),
		bytes.Replace(body, []byte(`{`), []byte(`{"other":1,`), 1),
		append(bytes.Clone(body), ' '),
		append([]byte("\u00a0"), body...),
	}
}

var decodeEdgeCases = []string{`{}`, ``, `{`, `null`, `[]`, ` {"taskId":"t"} `, `{"taskId":"t"}x`, `{"taskId":"t",}`, `{,}`,
	`{"attempt":01}`, `{"attempt":1.0}`, `{"attempt":1e0}`, `{"attempt":-0}`, `{"attempt":99999999999999999999}`,
	`{"revision":-1}`, `{"revision":18446744073709551615}`, `{"revision":18446744073709551616}`, `{"taskId":null}`,
	`{"taskId":"a\u0062"}`, `{"taskId":"é"}`, "{\"taskId\":\"\xff\"}", `{"completeBy":"2026-11-26T05:00:00Z"}`,
	`{"completeBy":"2026-11-26T05:00:00.100Z"}`, `{"completeBy":"2026-11-26T05:00:00+00:00"}`, `{"time":"2026-11-26T05:00:00z"}`,
	`{"results":null}`, `{"results":{}}`, `{"results":{"a":1,"a":2}}`, `{"results":{"a":1},"results":{"b":2}}`, `{"results":{"\u0061":1}}`,
	`{"results":[]}`, `{"http":null}`, `{"http":{"method":"GET","url":"x"}}`, `{"http":{"method":1}}`, `{"http":{},"http":null}`,
	`{"order":null}`, `{"order":{"a":"}"}}`, `{"result":["\"]"]}`, `{"result":{"a":}}`, `{"action":"execute","action":"compensate"}`,
	`{"status":"processed","orderId":"o","status":"failed"}`, `{"state":"Processed"}`, `{"priority":"high"}`,
	`{"taskId":"t","step":"s","action":"execute","attempt":1,"completeBy":"2026-11-26T05:00:00Z","idempotencyKey":"k"}`,
	`{"orderId":"o","status":"processed","state":"Processed","revision":7,"time":"2026-11-21T10:00:00Z"}`}

func TestParseExecuteStepPlainDecodesAsStrict(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	plainStrings, plainResults := []string{"", "o-1", "payment", "a b", "é", "execute", "compensate", "high"},
		[]string{"", `{}`, `{"paymentId":"p-1"}`, `[1,{"a":null}]`, `null`, `1`}
	plain := 0
	for i := 0; i < 5000; i++ {
		c := randomCommand(rng, replyStrings, replyResults)
		if i%2 == 0 {
			c = randomCommand(rng, plainStrings, plainResults)
			c.Action = []string{ActionExecute, ActionCompensate}[rng.IntN(2)]
			c.Attempt = 1 + rng.IntN(3)
		}
		body, err := AppendExecuteStep(nil, c)
		if err != nil {
			continue
		}
		if checkCommand(t, body) {
			plain++
		}
		for _, m := range mutations(rng, body) {
			checkCommand(t, m)
		}
	}
	for _, body := range decodeEdgeCases {
		checkCommand(t, []byte(body))
	}
	if plain < 1000 {
		t.Fatalf("the plain decoder read only %d of the encoded commands", plain)
	}
}

func randomStatus(rng *rand.Rand, strs, results []string) TaskStatus {
	s := func() string { return strs[rng.IntN(len(strs))] }
	ints := []int{0, 1, 2, -1, 1 << 40}
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+30*60), time.FixedZone("s", 45)}
	times := []time.Time{{}, time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)}
	st := TaskStatus{OrderID: s(), Status: s(), State: domain.TaskState(s()), Step: s(), Attempt: ints[rng.IntN(len(ints))], Reason: s(),
		Workflow: s(), WorkflowVersion: ints[rng.IntN(len(ints))], Priority: domain.Priority(s()),
		Revision: []uint64{0, 1, 7, 1 << 63}[rng.IntN(4)], Time: times[rng.IntN(len(times))].In(zones[rng.IntN(len(zones))]),
		ReplyTo: s(), TraceParent: s()}
	if res := results[rng.IntN(len(results))]; res != "" {
		st.Result = json.RawMessage(res)
	}
	return st
}

func TestParseTaskStatusPlainDecodesAsStrict(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	plainStrings, plainResults := []string{"", "o-1", "processed", "Processed", "normal", "a b", "é"}, []string{"", `{}`, `{"a":[1]}`, `"s"`}
	plain := 0
	for i := 0; i < 5000; i++ {
		st := randomStatus(rng, replyStrings, replyResults)
		if i%2 == 0 {
			st = randomStatus(rng, plainStrings, plainResults)
		}
		body, err := json.Marshal(st)
		if err != nil {
			continue
		}
		if checkStatus(t, body) {
			plain++
		}
		for _, m := range mutations(rng, body) {
			checkStatus(t, m)
		}
	}
	for _, body := range decodeEdgeCases {
		checkStatus(t, []byte(body))
	}
	if plain < 1000 {
		t.Fatalf("the plain decoder read only %d of the encoded statuses", plain)
	}
}

func FuzzParseExecuteStepPlain(f *testing.F) {
	c := ExecuteStep{TaskID: "o-1", Workflow: "order", Step: "payment", Agent: "payment", Action: ActionExecute, Attempt: 1,
		CompleteBy: time.Date(2026, 11, 26, 5, 0, 0, 120000000, time.UTC), IdempotencyKey: "o-1/payment", WorkflowVersion: 2,
		Order: json.RawMessage(`{"orderId":"o-1","items":[1,2]}`), Results: map[string]json.RawMessage{"inventory": json.RawMessage(`{"reserved":true}`)},
		Priority: domain.PriorityHigh}
	body, _ := AppendExecuteStep(nil, c)
	f.Add(body)
	c.HTTP, c.Action, c.Result = &domain.HTTPCall{Method: "POST", URL: "http://svc/x"}, ActionCompensate, json.RawMessage(`"r"`)
	body, _ = AppendExecuteStep(nil, c)
	f.Add(body)
	for _, body := range decodeEdgeCases {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkCommand(t, body) })
}

func FuzzParseTaskStatusPlain(f *testing.F) {
	for _, st := range []TaskStatus{
		{OrderID: "o-1", Status: StatusReceived, State: domain.StateProcessing, Workflow: "order", WorkflowVersion: 1, Priority: domain.PriorityNormal,
			Revision: 0, Time: time.Date(2026, 11, 26, 5, 0, 0, 120000000, time.UTC)},
		{OrderID: "o-1", Status: StatusStepSucceeded, State: domain.StateProcessing, Step: "payment", Attempt: 1,
			Result: json.RawMessage(`{"paymentId":"p-1"}`), Revision: 3, Time: time.Date(2026, 11, 26, 5, 0, 1, 0, time.UTC)},
	} {
		body, _ := json.Marshal(st)
		f.Add(body)
	}
	for _, body := range decodeEdgeCases {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkStatus(t, body) })
}

func BenchmarkParseExecuteStep(b *testing.B) {
	c := ExecuteStep{TaskID: "order-000123", Workflow: "order", Step: "charge-payment", Agent: "payment", Action: ActionExecute, Attempt: 1,
		CompleteBy: time.Date(2026, 11, 26, 5, 0, 30, 123456789, time.UTC), IdempotencyKey: "order-000123/charge-payment", WorkflowVersion: 1,
		Order:   json.RawMessage(`{"orderId":"order-000123","customer":"c-17","amount":129.5,"items":[{"sku":"A-1","qty":2}]}`),
		Results: map[string]json.RawMessage{"reserve-inventory": json.RawMessage(`{"reservation":"r-000123"}`)}}
	body, _ := AppendExecuteStep(nil, c)
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseExecuteStep(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := strictExecuteStep(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkParseTaskStatus(b *testing.B) {
	st := TaskStatus{OrderID: "order-000123", Status: StatusStepSucceeded, State: domain.StateProcessing, Step: "charge-payment", Attempt: 1,
		Result: json.RawMessage(`{"paymentId":"p-000123"}`), Revision: 4, Time: time.Date(2026, 11, 26, 5, 0, 1, 123456789, time.UTC)}
	body, _ := json.Marshal(st)
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseTaskStatus(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := strictTaskStatus(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestAppendTaskStatusEncodesAsJSONMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	plainStrings, plainResults := []string{"", "o-1", "processed", "Processed", "normal", "a b", "é"}, []string{"", `{}`, `{"a":[1]}`, `"s"`}
	for i := 0; i < 20000; i++ {
		st := randomStatus(rng, replyStrings, replyResults)
		if i%2 == 0 {
			st = randomStatus(rng, plainStrings, plainResults)
		}
		if i%7 == 0 {
			st.Time = st.Time.In(time.FixedZone("far", 30*3600))
		}
		checkEncodesAsMarshal(t, st, AppendTaskStatus)
	}
}

func TestAppendTaskStatusAllocatesNothingIntoRoom(t *testing.T) {
	st := TaskStatus{OrderID: "order-000123", Status: StatusStepSucceeded, State: domain.StateProcessing, Step: "charge-payment", Attempt: 1,
		Result: json.RawMessage(`{"paymentId":"p-000123"}`), Revision: 4, Time: time.Date(2026, 11, 26, 5, 0, 1, 123456789, time.UTC)}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { _, _ = AppendTaskStatus(buf[:0], st) }); n != 0 {
		t.Fatalf("AppendTaskStatus allocated %v times a status", n)
	}
}
