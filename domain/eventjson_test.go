package domain_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

// fastPathEvents are the events the reflection-free codec handles, as every
// order writes them.
func fastPathEvents() []domain.Event {
	at := time.Date(2026, 11, 26, 4, 5, 6, 789000000, time.UTC)
	return []domain.Event{
		domain.TaskSubmitted{TaskID: "order-1", Workflow: "order-fulfilment", WorkflowVersion: 2,
			Steps: []string{"reserve-inventory", "charge-payment", "ship-order"}, ReplyTo: "reply.shop-7",
			Order: json.RawMessage(`{"orderId":"order-1", "amount": 12.5}`), SubmittedAt: at,
			TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Priority: domain.PriorityHigh},
		domain.TaskSubmitted{TaskID: "order-2", Workflow: "w", Steps: []string{}, Order: nil, SubmittedAt: at.In(time.FixedZone("", 5*3600+30*60))},
		domain.StepDispatched{TaskID: "order-1", Step: "charge-payment", Agent: "payments", Instance: "payments-1", Attempt: 3,
			CompleteBy: at.Add(30 * time.Second), LockedBy: "scheduler-a", IdempotencyKey: "order-1/charge-payment", DispatchedAt: at},
		domain.StepSucceeded{TaskID: "order-1", Step: "charge-payment", Attempt: 1, Result: json.RawMessage(`{"receipt":"r-9"}`),
			At: at, Answer: domain.Answer{Instance: "payments-1", Tries: 2}},
		domain.StepSucceeded{TaskID: "order-1", Step: "charge-payment", Attempt: 1, At: time.Time{}},
		domain.TaskProcessed{TaskID: "order-1", At: at.In(time.FixedZone("", -7*3600))},
	}
}

// TestEventJSONFastPathCoversEveryOrdersEvents checks that the events each
// order writes take the fast path (so the saving cannot vanish unnoticed)
// and that both directions agree with encoding/json.
func TestEventJSONFastPathCoversEveryOrdersEvents(t *testing.T) {
	for _, e := range fastPathEvents() {
		want, err := json.Marshal(e)
		require.NoError(t, err)
		got, ok := domain.AppendEventJSON(nil, e)
		require.True(t, ok, "%T takes the fast path", e)
		require.Equal(t, string(want), string(got))

		decoded, ok := domain.DecodeEventJSON(e.EventType(), got)
		require.True(t, ok, "%T decodes on the fast path", e)
		requireDecodesAsEncodingJSON(t, e.EventType(), got, decoded)

		viaAPI, err := domain.EncodeEvent(e)
		require.NoError(t, err)
		require.Equal(t, string(want), string(viaAPI))
	}
}

// TestEventJSONFallsBackWhereEncodingJSONDiffers checks inputs the fast
// path must leave to encoding/json.
func TestEventJSONFallsBackWhereEncodingJSONDiffers(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for name, e := range map[string]domain.Event{
		"html":         domain.TaskProcessed{TaskID: "a<b", At: at},
		"quote":        domain.TaskProcessed{TaskID: `a"b`, At: at},
		"invalid utf8": domain.TaskProcessed{TaskID: "a\xffb", At: at},
		"separator":    domain.TaskProcessed{TaskID: "a\u2028b", At: at},
		"year":         domain.TaskProcessed{TaskID: "a", At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		_, ok := domain.AppendEventJSON(nil, e)
		require.False(t, ok, name)
		requireEncodesAsEncodingJSON(t, e)
	}
	// A result is compacted and HTML-escaped as encoding/json does it.
	raw := domain.StepSucceeded{TaskID: "a", Result: json.RawMessage("{\"x\" : \"<\u2028\"}"), At: at}
	got, ok := domain.AppendEventJSON(nil, raw)
	require.True(t, ok, "raw html")
	want, err := json.Marshal(raw)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
	for name, data := range map[string]string{
		"escaped":      `{"taskId":"a\u0041","at":"2026-01-02T03:04:05Z"}`,
		"case":         `{"TaskID":"a","at":"2026-01-02T03:04:05Z"}`,
		"unknown":      `{"taskId":"a","extra":1,"at":"2026-01-02T03:04:05Z"}`,
		"null time":    `{"taskId":"a","at":null}`,
		"short time":   `{"taskId":"a","at":"2026-01-02T03:04:05.000Z"}`,
		"lower t":      `{"taskId":"a","at":"2026-01-02t03:04:05Z"}`,
		"offset hours": `{"taskId":"a","at":"2026-01-02T03:04:05+24:00"}`,
		"invalid":      `{"taskId":"a",}`,
	} {
		_, ok := domain.DecodeEventJSON(domain.TaskProcessedType, []byte(data))
		require.False(t, ok, name)
	}
	_, ok = domain.DecodeEventJSON(domain.StepDispatchedType, []byte(`{"attempt":1.0}`))
	require.False(t, ok, "a float for an int")
}

// FuzzEventJSONMatchesEncodingJSON holds the reflection-free codec to
// encoding/json: whatever it encodes is byte for byte json.Marshal's
// output, and whatever it decodes is json.Unmarshal's value.
func FuzzEventJSONMatchesEncodingJSON(f *testing.F) {
	for i, e := range fastPathEvents() {
		data, _ := json.Marshal(e)
		f.Add(uint8(i), "order-1", "charge-payment", int64(i), int64(1764129906789000000), []byte(`{"a":[1, "b"]}`), data)
	}
	f.Add(uint8(1), "é\u2029", "<", int64(-1), int64(-9223372036854775807), []byte(`null`), []byte(`{"taskId":"x","steps":null}`))
	types := []string{domain.TaskSubmittedType, domain.StepDispatchedType, domain.StepSucceededType, domain.TaskProcessedType}
	f.Fuzz(func(t *testing.T, which uint8, s1, s2 string, n, nanos int64, raw, data []byte) {
		zones := []*time.Location{time.UTC, time.Local, time.FixedZone("", int(n%(30*3600)))}
		at := time.Unix(0, nanos).In(zones[int(uint64(n)%3)])
		var e domain.Event
		switch which % 4 {
		case 0:
			e = domain.TaskSubmitted{TaskID: s1, Workflow: s2, WorkflowVersion: int(n), Steps: []string{s2, s1}, ReplyTo: s2,
				Order: raw, SubmittedAt: at, TraceParent: s1, Priority: domain.Priority(s2)}
		case 1:
			e = domain.StepDispatched{TaskID: s1, Step: s2, Agent: s1, Instance: s2, Attempt: int(n), CompleteBy: at,
				LockedBy: s2, IdempotencyKey: s1, DispatchedAt: at.Add(time.Duration(n))}
		case 2:
			e = domain.StepSucceeded{TaskID: s1, Step: s2, Attempt: int(n), Result: raw, At: at, Answer: domain.Answer{Instance: s2, Tries: int(n)}}
		default:
			e = domain.TaskProcessed{TaskID: s1, At: at}
		}
		if encoded, ok := domain.AppendEventJSON(nil, e); ok {
			requireEncodesAsEncodingJSON(t, e)
			want, _ := json.Marshal(e)
			require.Equal(t, string(want), string(encoded))
			decoded, ok := domain.DecodeEventJSON(e.EventType(), encoded)
			require.True(t, ok, "what the fast path writes, it reads: %s", encoded)
			requireDecodesAsEncodingJSON(t, e.EventType(), encoded, decoded)
		}
		eventType := types[which%4]
		if decoded, ok := domain.DecodeEventJSON(eventType, data); ok {
			requireDecodesAsEncodingJSON(t, eventType, data, decoded)
		}
	})
}

func requireEncodesAsEncodingJSON(t *testing.T, e domain.Event) {
	t.Helper()
	want, wantErr := json.Marshal(e)
	got, err := domain.EncodeEvent(e)
	if wantErr != nil {
		require.Error(t, err)
		return
	}
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

func requireDecodesAsEncodingJSON(t *testing.T, eventType string, data []byte, got domain.Event) {
	t.Helper()
	want := reflect.New(reflect.TypeOf(got))
	require.NoError(t, json.Unmarshal(data, want.Interface()), "encoding/json reads %s", data)
	require.Equal(t, want.Elem().Interface(), got, "%s", data)
	require.True(t, reflect.DeepEqual(want.Elem().Interface(), got), "%s", data)
}

// BenchmarkEventJSON compares the codec of the events every order writes
// with encoding/json's: go test -run '^$' -bench EventJSON ./domain/
func BenchmarkEventJSON(b *testing.B) {
	events := fastPathEvents()
	encoded := make([][]byte, len(events))
	for i, e := range events {
		encoded[i], _ = json.Marshal(e)
	}
	b.Run("encode/saga", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_, _ = domain.EncodeEvent(events[i%len(events)])
		}
	})
	b.Run("encode/encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_, _ = json.Marshal(events[i%len(events)])
		}
	})
	b.Run("decode/saga", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_, _ = domain.DecodeEvent(events[i%len(events)].EventType(), encoded[i%len(events)])
		}
	})
	b.Run("decode/encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			v := reflect.New(reflect.TypeOf(events[i%len(events)]))
			_ = json.Unmarshal(encoded[i%len(events)], v.Interface())
		}
	})
}

// TestEventJSONBufferFitsTheEvent checks that an encoded event's buffer is
// not much larger than the event, since stores may keep it.
func TestEventJSONBufferFitsTheEvent(t *testing.T) {
	for _, e := range fastPathEvents() {
		b, err := domain.EncodeEvent(e)
		require.NoError(t, err)
		require.LessOrEqual(t, cap(b), len(b)+128, "%T: %d bytes in a buffer of %d", e, len(b), cap(b))
		require.GreaterOrEqual(t, cap(b), len(b))
	}
}
