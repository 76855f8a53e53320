package domain_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sagaengine/saga/domain"
)

// The decoders of stored events and decisions must never panic, whatever
// they are given (the wire messages' parsers are fuzzed in domain/protocol).

var wireNames = []string{domain.TaskSubmittedType, domain.StepDispatchedType, domain.StepSucceededType, domain.StepFailedType,
	domain.TaskProcessedType, domain.TaskFailedType, domain.StepTimedOutType, domain.StepRetryScheduledType,
	domain.CompensationRequestedType, domain.CompensationDispatchedType, domain.StepCompensatedType,
	domain.CompensationFailedType, domain.TaskCompensatedType, domain.StepResubmittedType, domain.TaskCancelledType}

// FuzzEventPayloads feeds arbitrary payloads, under every wire name, to the
// decoder and folds whatever decodes into a task with a history, then asks
// for a decision: nothing may panic, whatever a stored event holds.
func FuzzEventPayloads(f *testing.F) {
	for i, name := range wireNames {
		data, _ := json.Marshal(map[string]any{"taskId": "o-1", "step": "charge-payment", "attempt": i % 3, "steps": []string{"a"}})
		f.Add(uint8(i), data)
		_ = name
	}
	f.Add(uint8(0), []byte(`{"steps":null}`))
	f.Add(uint8(2), []byte(`{"step":"nope","attempt":99}`))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		e, err := domain.DecodeEvent(wireNames[int(which)%len(wireNames)], data)
		if err != nil {
			return
		}
		task := domain.Fold("o-1", with(processed(1), dispatched("charge-payment", 1)))
		task.Apply(e)
		task.Next(wf, d)
		_ = task.InFlight()
		task.NextWake()
	})
}

// FuzzDecisions drives a task with an arbitrary sequence of triggers (agent
// replies of any kind, timeouts, operator actions, scheduler decisions at
// any time) and checks the invariants after each: no panic, no attempt
// dispatched twice, nothing after a final state.
func FuzzDecisions(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 0, 1})
	f.Add([]byte{0, 2, 0, 3, 0, 3, 0, 3, 0, 1, 1, 1})
	f.Add([]byte{0, 4, 5, 0, 1, 6, 0, 7})
	f.Fuzz(func(t *testing.T, ops []byte) {
		history := []domain.Event{submitted()}
		now := t0
		seen := map[string]bool{}
		finals := 0
		for i, op := range ops {
			if i > 200 {
				break
			}
			task := domain.Fold("o-1", history)
			dec := domain.Decision{Now: now, Actor: "fuzz", Random: float64(op%10) / 10}
			var events []domain.Event
			inFlight := task.InFlight()
			pick := func() (domain.InFlightAttempt, bool) {
				if len(inFlight) == 0 {
					return domain.InFlightAttempt{}, false
				}
				return inFlight[int(op)%len(inFlight)], true
			}
			switch op % 8 {
			case 0:
				events = task.Next(wf, dec)
			case 1, 2, 3:
				if a, ok := pick(); ok {
					r := domain.Reply{Step: a.Step, Compensation: a.Compensation, Attempt: a.Attempt, Succeeded: true}
					if op%8 == 2 {
						r.Succeeded, r.Failure = false, domain.FailureTransient
					}
					if op%8 == 3 {
						r.Succeeded, r.Failure = false, domain.FailurePermanent
					}
					events, _ = task.RecordReply(wf, r, dec)
				}
			case 4:
				if a, ok := pick(); ok {
					now = a.CompleteBy
					dec.Now = now
					events, _ = task.TimeOut(wf, a.Step, a.Compensation, a.Attempt, dec)
				}
			case 5:
				events, _ = task.Cancel(wf, "fuzz", "", dec)
			case 6:
				events, _ = task.Resubmit(wf, "", "fuzz", dec)
			case 7:
				now = now.Add(time.Duration(op) * 100 * time.Millisecond)
			}
			for _, e := range events {
				if finals > 0 {
					t.Fatalf("%s after the final state; ops %v", e.EventType(), ops[:i+1])
				}
				key := ""
				switch e := e.(type) {
				case domain.StepDispatched:
					key = fmt.Sprint("dispatch/", e.Step, "/", e.Attempt)
				case domain.CompensationDispatched:
					key = fmt.Sprint("compensation/", e.Step, "/", e.Attempt)
				case domain.TaskProcessed, domain.TaskCompensated:
					finals++
				}
				if key != "" && seen[key] {
					t.Fatalf("%s twice; ops %v", key, ops[:i+1])
				}
				seen[key] = key != ""
			}
			history = append(history, events...)
		}
	})
}

// FuzzWorkflowDefinitions: a definition is refused or it validates, encodes
// and reads back as the same workflow; its templates render or fail with
// ErrTemplate, never panic.
func FuzzWorkflowDefinitions(f *testing.F) {
	for _, seed := range []string{
		`{"name":"w","steps":[{"name":"a","agent":"x"}]}`,
		`{"name":"w","trigger":{"topics":["shop.events"],"type":"T","typeField":"/type","idField":"/order/id"},"steps":[{"name":"a","http":{"url":"http://s/{{order.id}}","body":{"r":"{{results.z}}","n":"{{order}}"}},"compensation":{"http":{"url":"http://s/u","body":{"p":"{{result.id}}"}}}},{"name":"z","agent":"y","compensation":"undo"}]}`,
		`{"name":"w","defaults":{"budget":"1s","attempts":2,"backoff":{"initial":"1ms","multiplier":1.5,"max":"2s","jitter":0.5}},"steps":[]}`,
		`{"name":"","steps":[{"name":"a","budget":-5}]}`, `[]`, `{"steps":{"a":1}}`, `{"name":"w","steps":[{"name":"a","http":{"url":"http://h/{{{{x}}}}"}}]}`,
	} {
		f.Add([]byte(seed), []byte(`{"id":"o 1/x","order":{"id":7},"items":[1,{"a":null}]}`))
	}
	f.Fuzz(func(t *testing.T, def, order []byte) {
		w, err := domain.ParseDefinition(def)
		if err != nil {
			return
		}
		if err := w.Validate(); err != nil {
			t.Fatalf("accepted a definition that does not validate: %v\n%s", err, def)
		}
		doc, err := w.MarshalDefinition()
		if err != nil {
			t.Fatalf("cannot encode an accepted definition: %v", err)
		}
		again, err := domain.ParseDefinition(doc)
		if err != nil || !w.Equal(again) {
			t.Fatalf("an accepted definition does not read back: %v\n%s", err, doc)
		}
		data := domain.TemplateData{TaskID: "o-1", Workflow: w.Name, Version: 1, Step: "a", Attempt: 1, IdempotencyKey: "o-1/a",
			Order: order, Results: map[string]json.RawMessage{"z": order}, Result: order}
		for _, s := range w.Steps {
			for _, call := range []*domain.HTTPCall{s.HTTP, compensationHTTP(s)} {
				if call == nil {
					continue
				}
				_, _ = domain.RenderText(call.URL, data, domain.EscapeURLValue)
				if len(call.Body) > 0 {
					if body, err := domain.RenderJSON(call.Body, data); err == nil && !json.Valid(body) {
						t.Fatalf("rendered an invalid JSON body %q", body)
					}
				}
			}
		}
	})
}

func compensationHTTP(s domain.StepDefinition) *domain.HTTPCall {
	if s.Compensation == nil {
		return nil
	}
	return s.Compensation.HTTP
}
