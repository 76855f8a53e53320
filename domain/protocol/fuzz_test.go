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
		`{"taskId":"o-1","step":"s","attempt":-1,"outcome":"failed"}`, `{"result":{"a":[]}}`, `nope`,
		`{"taskId":"o-1","step":"s","attempt":1,"outcome":"unavailable","reason":"breaker open","instance":"p-1/payment","tries":0}`,
		`{"taskId":"o-1","step":"s","attempt":1,"outcome":"succeeded","tries":-3}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := protocol.ParseStepReply(body)
		if err != nil {
			return
		}
		known := r.Outcome == protocol.OutcomeSucceeded || r.Outcome == protocol.OutcomeFailed || r.Outcome == protocol.OutcomeUnavailable
		if r.TaskID == "" || r.Step == "" || r.Attempt < 1 || r.Tries < 0 || !known {
			t.Fatalf("accepted an invalid reply %+v", r)
		}
	})
}

// FuzzParseAgentHeartbeat: anyone who can write to saga.agents can send
// anything; what the parser accepts is a heartbeat the scheduler can
// route by.
func FuzzParseAgentHeartbeat(f *testing.F) {
	for _, seed := range []string{
		`{"agent":"payment","instance":"p-1/payment","health":"healthy","capacity":4,"inFlight":1,"expiresAt":"2026-11-22T10:00:03Z",` +
			`"partitions":{"saga.cmd.payment":[0,2]},"rateLimit":{"calls":50,"periodMillis":1000},"waiting":{"high":1}}`,
		`{"agent":"payment","instance":"p-2","health":"trial","capacity":-1,"expiresAt":"2026-11-22T10:00:03Z"}`,
		`{"agent":"payment","instance":"p-3","health":"sick","expiresAt":"2026-11-22T10:00:03Z"}`,
		`{"agent":"payment","instance":"p-4","health":"healthy","rateLimit":{"calls":0,"periodMillis":0},"expiresAt":"2026-11-22T10:00:03Z"}`,
		`{}`, `null`, `[]`, `nope`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		h, err := protocol.ParseAgentHeartbeat(body)
		if err != nil {
			return
		}
		switch {
		case h.Agent == "" || h.Instance == "" || h.ExpiresAt.IsZero():
			t.Fatalf("accepted a heartbeat without agent, instance or expiry: %+v", h)
		case h.Capacity < 0 || h.InFlight < 0 || h.GlobalLimit < 0:
			t.Fatalf("accepted negative counts: %+v", h)
		case h.RateLimit != nil && (h.RateLimit.Calls < 1 || h.RateLimit.PeriodMillis < 1):
			t.Fatalf("accepted an empty rate limit: %+v", h.RateLimit)
		}
		if room := h.Room(); room < 0 || (h.Health != protocol.HealthHealthy && h.Health != protocol.HealthTrial && room != 0) {
			t.Fatalf("room %d for %+v", room, h)
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
