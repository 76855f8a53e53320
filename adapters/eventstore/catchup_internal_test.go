package eventstore

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/domain"
)

var errCaughtUp = errors.New("caught up")

// collectUntilCaughtUp runs follow until the subscription is caught up and
// returns what it delivered, with a nil event for the caught-up signal.
func collectUntilCaughtUp(t *testing.T, follow func(handle func(domain.SubscriptionItem) error) error) []*domain.RecordedEvent {
	t.Helper()
	var got []*domain.RecordedEvent
	err := follow(func(item domain.SubscriptionItem) error {
		got = append(got, item.Event)
		if item.CaughtUp {
			return errCaughtUp
		}
		return nil
	})
	var h handlerError
	require.True(t, errors.As(err, &h), "%v", err)
	require.ErrorIs(t, h.err, errCaughtUp)
	return got
}

// leanStore dials, without TLS, an embedded server of its own with the
// given append limit (0: the server's default), on the lean catch-up path.
func leanStore(t *testing.T, maxAppendSize int) (*Store, context.Context) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: quiet, MaxAppendSize: maxAppendSize})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	s, err := Dial(fmt.Sprintf("esdb://%s?tls=false", srv.Addr()), quiet)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NotNil(t, s.pipe)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return s, ctx
}

// TestLeanCatchUpDeliversWhatTheOfficialClientDoes follows $all on both
// paths, from the start, after a position and with a prefix filter, over
// saga's events and foreign ones (other metadata, none, empty data, text
// content): the lean path delivers exactly what the official client and
// fromRecorded deliver, caught-up signal included.
func TestLeanCatchUpDeliversWhatTheOfficialClientDoes(t *testing.T) {
	s, ctx := leanStore(t, 0)

	prefix := "task-" + uuid.NewString()[:8]
	for i := 0; i < 3; i++ {
		_, err := s.Append(ctx, fmt.Sprintf("%s-%d", prefix, i), domain.ExpectAny(),
			domain.NewEvent{Type: "StepSucceeded", Data: []byte(fmt.Sprintf(`{"n":%d}`, i)),
				Metadata: domain.EventMetadata{CorrelationID: "o-1", CausationID: "m-1", Actor: "test", TraceParent: "00-ab-cd-01"}},
			domain.NewEvent{Type: "StepFailed", Data: []byte(`{}`), Metadata: domain.EventMetadata{CorrelationID: "o-2"}})
		require.NoError(t, err)
	}
	_, err := s.client.AppendToStream(ctx, "foreign-"+uuid.NewString(), esdb.AppendToStreamOptions{},
		esdb.EventData{EventType: "Other", ContentType: esdb.ContentTypeJson, Data: []byte(`{"x":1}`), Metadata: []byte(`{"actor":7}`)},
		esdb.EventData{EventType: "NoMeta", ContentType: esdb.ContentTypeBinary, Data: []byte("bytes")},
		esdb.EventData{EventType: "Empty", ContentType: esdb.ContentTypeJson},
		esdb.EventData{EventType: "BadMeta", ContentType: esdb.ContentTypeJson, Data: []byte(`{}`), Metadata: []byte(`not json`)})
	require.NoError(t, err)

	official := func(from domain.SubscribeFrom, prefix string) []*domain.RecordedEvent {
		after := positionAfter(from)
		var backoff time.Duration
		return collectUntilCaughtUp(t, func(handle func(domain.SubscriptionItem) error) error {
			return s.followOfficial(ctx, prefix, handle, &after, &backoff)
		})
	}
	lean := func(from domain.SubscribeFrom, prefix string) []*domain.RecordedEvent {
		after := positionAfter(from)
		confirmed := false
		got := collectUntilCaughtUp(t, func(handle func(domain.SubscriptionItem) error) error {
			return s.pipe.followAll(ctx, prefix, handle, &after, func() { confirmed = true })
		})
		require.True(t, confirmed)
		return got
	}
	all := official(domain.FromStart(), "")
	require.Len(t, all, 11, "10 events and the caught-up signal")
	require.Nil(t, all[10])
	require.Equal(t, all, lean(domain.FromStart(), ""))
	from := domain.AfterPosition(all[2].Position)
	require.Equal(t, official(from, ""), lean(from, ""))
	require.Len(t, lean(from, ""), 8)
	filtered := lean(domain.FromStart(), prefix)
	require.Equal(t, official(domain.FromStart(), prefix), filtered)
	require.Len(t, filtered, 7)
}

// TestLeanCatchUpReadsAnEventOverGRPCsDefaultLimit: an event of 5 MiB,
// over gRPC's default receive limit of 4 MiB and under the official
// client's 17 MiB, reaches the lean $all reader as it reaches the official
// client, instead of dropping the subscription at it again and again.
func TestLeanCatchUpReadsAnEventOverGRPCsDefaultLimit(t *testing.T) {
	s, ctx := leanStore(t, 8<<20)

	big := []byte(`"` + strings.Repeat("b", 5<<20) + `"`)
	_, err := s.Append(ctx, "task-big", domain.ExpectNoStream(), domain.NewEvent{Type: "Big", Data: big})
	require.NoError(t, err)
	_, err = s.Append(ctx, "task-after", domain.ExpectNoStream(), domain.NewEvent{Type: "After", Data: []byte(`{}`)})
	require.NoError(t, err)
	var after allPosition
	got := collectUntilCaughtUp(t, func(handle func(domain.SubscriptionItem) error) error {
		return s.pipe.followAll(ctx, "task-", handle, &after, func() {})
	})
	require.Len(t, got, 3, "both events and the caught-up signal")
	require.Equal(t, big, got[0].Data)
	require.Equal(t, "After", got[1].Type)
}

// TestLeanCatchUpKeepsNoReceiveBuffer follows $all over events whose
// messages gRPC receives into pooled buffers (a KiB and more), which it
// reuses as soon as each is decoded: every event delivered still holds its
// own data after the ones behind it arrived.
func TestLeanCatchUpKeepsNoReceiveBuffer(t *testing.T) {
	s, ctx := leanStore(t, 0)

	const events = 200
	data := func(i int) []byte {
		return []byte(fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat(string(rune('a'+i%26)), 1500+i)))
	}
	for i := 0; i < events; i++ {
		_, err := s.Append(ctx, fmt.Sprintf("task-%d", i), domain.ExpectNoStream(), domain.NewEvent{Type: "StepSucceeded", Data: data(i)})
		require.NoError(t, err)
	}
	var after allPosition
	got := collectUntilCaughtUp(t, func(handle func(domain.SubscriptionItem) error) error {
		return s.pipe.followAll(ctx, "task-", handle, &after, func() {})
	})
	require.Len(t, got, events+1, "the events and the caught-up signal")
	for i, e := range got[:events] {
		require.Equal(t, fmt.Sprintf("task-%d", i), e.Stream)
		require.Equal(t, string(data(i)), string(e.Data), "event %d", i)
	}
}

// TestDecodeReadRespRefusesMalformedMessages cuts a valid event message
// short at every byte and flips its bytes: decoding fails or succeeds, but
// never panics, and the whole message decodes.
func TestDecodeReadRespRefusesMalformedMessages(t *testing.T) {
	id := uuid.New()
	most, least := esdb.UUIDAsInt64(id)
	msg := &streams.ReadResp{Content: &streams.ReadResp_Event{Event: &streams.ReadResp_ReadEvent{
		Event: &streams.ReadResp_ReadEvent_RecordedEvent{
			Id:               &shared.UUID{Value: &shared.UUID_Structured_{Structured: &shared.UUID_Structured{MostSignificantBits: most, LeastSignificantBits: least}}},
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte("s")},
			StreamRevision:   4, CommitPosition: 99, PreparePosition: 99,
			Metadata:       map[string]string{"type": "T", "content-type": "application/json", "created": "17000000000000000"},
			CustomMetadata: []byte(`{"correlationId":"o-1"}`),
			Data:           []byte(`{"a":1}`),
		},
		Position: &streams.ReadResp_ReadEvent_CommitPosition{CommitPosition: 99},
	}}}
	b, err := proto.Marshal(msg)
	require.NoError(t, err)
	var r readResp
	require.NoError(t, decodeReadResp(b, &r))
	require.Equal(t, respEvent, r.kind)
	require.Equal(t, domain.RecordedEvent{ID: id.String(), Stream: "s", Type: "T", Data: []byte(`{"a":1}`),
		Metadata: domain.EventMetadata{CorrelationID: "o-1"}, Revision: 4, Position: 99,
		Recorded: time.Unix(0, 17000000000000000*100).UTC()}, r.event)
	for n := 0; n < len(b); n++ {
		_ = decodeReadResp(b[:n], &r)
		flipped := append([]byte(nil), b...)
		flipped[n] ^= 0xff
		_ = decodeReadResp(flipped, &r)
	}
	noCreated := proto.Clone(msg).(*streams.ReadResp)
	delete(noCreated.GetEvent().GetEvent().Metadata, "created")
	b, err = proto.Marshal(noCreated)
	require.NoError(t, err)
	require.ErrorIs(t, decodeReadResp(b, &r), errMalformed)
}

// TestDecodeReadRespNamesOutliveTheBuffer checks the subscription's event
// types and stream names: each the one the message names, one string for a
// recurring type and for a stream repeated by the next event, and none of
// them in the receive buffer, which gRPC reuses; past maxTypeNames types,
// each is still right.
func TestDecodeReadRespNamesOutliveTheBuffer(t *testing.T) {
	frame := func(stream, eventType string) []byte {
		b, err := proto.Marshal(&streams.ReadResp{Content: &streams.ReadResp_Event{Event: &streams.ReadResp_ReadEvent{
			Event: &streams.ReadResp_ReadEvent_RecordedEvent{
				Id:               &shared.UUID{Value: &shared.UUID_String_{String_: uuid.NewString()}},
				StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(stream)},
				Metadata:         map[string]string{"type": eventType, "content-type": "application/json", "created": "1"},
			},
		}}})
		require.NoError(t, err)
		return b
	}
	var r readResp
	var firstType, firstStream string
	for i := 0; i < 3; i++ {
		b := frame("task-1", "StepSucceeded")
		require.NoError(t, decodeReadResp(b, &r))
		for j := range b {
			b[j] = 'x' // as the buffer's next message would
		}
		require.Equal(t, "StepSucceeded", r.event.Type)
		require.Equal(t, "task-1", r.event.Stream)
		if i == 0 {
			firstType, firstStream = r.event.Type, r.event.Stream
		}
		require.Same(t, unsafe.StringData(firstType), unsafe.StringData(r.event.Type), "a recurring type is one string")
		require.Same(t, unsafe.StringData(firstStream), unsafe.StringData(r.event.Stream), "a repeated stream is one string")
	}
	for i := 0; i < 2*maxTypeNames; i++ {
		wantStream, wantType := fmt.Sprintf("task-%d", i%3), fmt.Sprintf("Type%d", i)
		b := frame(wantStream, wantType)
		require.NoError(t, decodeReadResp(b, &r))
		clear(b)
		require.Equal(t, wantType, r.event.Type)
		require.Equal(t, wantStream, r.event.Stream)
	}
	require.Len(t, r.types, maxTypeNames)
}

// BenchmarkDecodeReadResp measures decoding one event of the $all
// subscription as the embedded server sends saga's events. Run:
//
//	go test -run '^$' -bench BenchmarkDecodeReadResp ./adapters/eventstore/
func BenchmarkDecodeReadResp(b *testing.B) {
	id := uuid.New()
	most, least := esdb.UUIDAsInt64(id)
	frame, err := proto.Marshal(&streams.ReadResp{Content: &streams.ReadResp_Event{Event: &streams.ReadResp_ReadEvent{
		Event: &streams.ReadResp_ReadEvent_RecordedEvent{
			Id:               &shared.UUID{Value: &shared.UUID_Structured_{Structured: &shared.UUID_Structured{MostSignificantBits: most, LeastSignificantBits: least}}},
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte("task-0f8fad5b-d9cb-469f-a165-70867728950e")},
			StreamRevision:   4, CommitPosition: 123456789, PreparePosition: 123456789,
			Metadata:       map[string]string{"type": "StepSucceeded", "content-type": "application/json", "created": "17000000000000000"},
			CustomMetadata: []byte(`{"correlationId":"0f8fad5b-d9cb-469f-a165-70867728950e","causationId":"7c9e6679-7425-40de-944b-e07fc1f90ae7","actor":"scheduler-1"}`),
			Data:           []byte(`{"taskId":"0f8fad5b-d9cb-469f-a165-70867728950e","step":"reserve-inventory","attempt":1,"at":"2026-11-26T07:00:00.123456789Z"}`),
		},
		Position: &streams.ReadResp_ReadEvent_CommitPosition{CommitPosition: 123456789},
	}}})
	require.NoError(b, err)
	var r readResp
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := decodeReadResp(frame, &r); err != nil {
			b.Fatal(err)
		}
	}
}
