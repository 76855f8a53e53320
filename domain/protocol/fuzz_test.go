package protocol_test

import (
	"encoding/json"
	"testing"

	"github.com/sagaengine/saga/domain/protocol"
)

// The decoders of outside input must never panic, and what they accept must
// be valid.

func FuzzParseOrder(f *testing.F) {
	for _, seed := range []string{`{"orderId":"o-1"}`, `{"orderId":"o-1","workflow":"order","replyTo":"r","items":[1]}`,
		`{"orderId":17}`, `[]`, `{"orderId":"a b"}`, `{"orderId":"o","replyTo":null}`, "\x00", `{"orderId":"` + string(make([]byte, 300)) + `"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		o, err := protocol.ParseOrder(body, 1<<16)
		if err != nil {
			return
		}
		if o.ID == "" || len(o.ID) > 200 || o.Workflow == "" || !json.Valid(o.Body) {
			t.Fatalf("accepted an invalid order %+v from %q", o, body)
		}
	})
}

func FuzzParseStepReply(f *testing.F) {
	for _, seed := range []string{`{"taskId":"o-1","step":"s","attempt":1,"outcome":"succeeded"}`,
		`{"taskId":"o-1","step":"s","attempt":2,"outcome":"failed","failure":"permanent","action":"compensate"}`,
		`{"taskId":"o-1","step":"s","attempt":-1,"outcome":"failed"}`, `{"result":{"a":[]}}`, `nope`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := protocol.ParseStepReply(body)
		if err != nil {
			return
		}
		if r.TaskID == "" || r.Step == "" || r.Attempt < 1 || (r.Outcome != protocol.OutcomeSucceeded && r.Outcome != protocol.OutcomeFailed) {
			t.Fatalf("accepted an invalid reply %+v", r)
		}
	})
}

func FuzzParseExecuteStep(f *testing.F) {
	for _, seed := range []string{`{"taskId":"o-1","step":"s","action":"execute","attempt":1,"completeBy":"2026-11-21T10:00:00Z","idempotencyKey":"o-1/s"}`,
		`{"taskId":"o-1","step":"s","action":"compensate","attempt":1,"completeBy":"bad","idempotencyKey":"k"}`, `{}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := protocol.ParseExecuteStep(body)
		if err != nil {
			return
		}
		if c.TaskID == "" || c.Step == "" || c.IdempotencyKey == "" || c.Attempt < 1 || c.CompleteBy.IsZero() {
			t.Fatalf("accepted an invalid command %+v", c)
		}
	})
}

func FuzzParseTaskStatus(f *testing.F) {
	for _, seed := range []string{`{"orderId":"o-1","status":"processed","state":"Processed","revision":7,"time":"2026-11-21T10:00:00Z"}`, `{"orderId":""}`, `1`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := protocol.ParseTaskStatus(body)
		if err == nil && (s.OrderID == "" || s.Status == "") {
			t.Fatalf("accepted an invalid status %+v", s)
		}
	})
}
