package protocol

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// httpBodyOf is what AppendHTTPCommandBody must write for c, through
// json.Marshal.
func httpBodyOf(c ExecuteStep) ([]byte, error) {
	return json.Marshal(httpCommandBody{TaskID: c.TaskID, Workflow: c.Workflow, WorkflowVersion: c.WorkflowVersion,
		Step: c.Step, Action: c.Action, Attempt: c.Attempt, IdempotencyKey: c.IdempotencyKey,
		Order: c.Order, Results: c.Results, Result: c.Result})
}

func TestAppendHTTPCommandBodyEncodesAsJSONMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	plainStrings, plainResults := []string{"", "o-1", "payment", "a b"}, []string{"", `{}`, `{"paymentId":"p-1"}`, `[1,{"a":null}]`}
	check := func(c ExecuteStep) {
		t.Helper()
		want, wantErr := httpBodyOf(c)
		got, gotErr := AppendHTTPCommandBody([]byte("prefix"), c)
		if (wantErr != nil) != (gotErr != nil) {
			t.Fatalf("%+v: json.Marshal error %v, the encoder's %v", c, wantErr, gotErr)
		}
		if wantErr == nil && !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("%+v:\n json.Marshal %s\n the encoder  %s", c, want, got)
		}
	}
	// Every field empty: an empty object, as json.Marshal writes it.
	check(ExecuteStep{})
	check(ExecuteStep{Attempt: -1})
	check(ExecuteStep{Results: map[string]json.RawMessage{}})
	for i := 0; i < 40000; i++ {
		c := randomCommand(rng, replyStrings, replyResults)
		if i%2 == 0 {
			c = randomCommand(rng, plainStrings, plainResults)
		}
		check(c)
	}
}

func TestAppendHTTPCommandBodyDoesNotAllocateForAPlainCommand(t *testing.T) {
	c := ExecuteStep{TaskID: "o-1", Workflow: "order", Step: "payment", Action: ActionExecute, Attempt: 1,
		IdempotencyKey: "o-1/payment", Order: json.RawMessage(`{"orderId":"o-1"}`)}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { _, _ = AppendHTTPCommandBody(buf[:0], c) }); n > 0 {
		t.Fatalf("AppendHTTPCommandBody allocated %v times a command", n)
	}
}

func BenchmarkHTTPCommandBody(b *testing.B) {
	c := ExecuteStep{TaskID: "0b7e9f7c-4b8e-4c57-9d0e-1f4f0a6f5a11", Workflow: "bench", WorkflowVersion: 1, Step: "step-2",
		Action: ActionExecute, Attempt: 1, IdempotencyKey: "0b7e9f7c-4b8e-4c57-9d0e-1f4f0a6f5a11/step-2",
		Order:   json.RawMessage(`{"orderId":"0b7e9f7c-4b8e-4c57-9d0e-1f4f0a6f5a11","amount":12.5,"items":[{"sku":"s1"}]}`),
		Results: map[string]json.RawMessage{"step-1": json.RawMessage(`{"service":"inventory","action":"execute","key":"k","at":"2026-11-26T12:00:00Z"}`)}}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = httpBodyOf(c)
		}
	})
	b.Run("AppendHTTPCommandBody", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = AppendHTTPCommandBody(make([]byte, 0, 512), c)
		}
	})
}
