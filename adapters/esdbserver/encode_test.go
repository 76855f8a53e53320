package esdbserver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
	"github.com/sagaengine/saga/adapters/esdbwire"
)

// generatedReadEvent builds e's ReadResp with the generated types, as the
// server did before it encoded events by hand: the reference encode must
// match.
func generatedReadEvent(e *eslog.RecordedEvent, uuidAsString bool) *streams.ReadResp {
	id := &shared.UUID{Value: &shared.UUID_Structured_{Structured: &shared.UUID_Structured{
		MostSignificantBits:  int64(binary.BigEndian.Uint64(e.ID[:8])),
		LeastSignificantBits: int64(binary.BigEndian.Uint64(e.ID[8:])),
	}}}
	if uuidAsString {
		id = &shared.UUID{Value: &shared.UUID_String_{String_: uuid.UUID(e.ID).String()}}
	}
	return &streams.ReadResp{Content: &streams.ReadResp_Event{Event: &streams.ReadResp_ReadEvent{
		Event: &streams.ReadResp_ReadEvent_RecordedEvent{
			Id:               id,
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(e.Stream)},
			StreamRevision:   e.Revision,
			PreparePosition:  e.Position,
			CommitPosition:   e.Position,
			Metadata: map[string]string{
				metaType:        e.Type,
				metaContentType: e.ContentType,
				metaCreated:     fmt.Sprint(e.Created / 100),
			},
			CustomMetadata: e.Metadata,
			Data:           e.Data,
		},
		Position: &streams.ReadResp_ReadEvent_CommitPosition{CommitPosition: e.Position},
	}}}
}

func encodeCases() []eslog.RecordedEvent {
	return []eslog.RecordedEvent{
		{ // Everything zero or empty that may be.
			ProposedEvent: eslog.ProposedEvent{Type: "t", ContentType: ""},
			Stream:        "s",
		},
		{
			ProposedEvent: eslog.ProposedEvent{
				ID:   uuid.MustParse("f47ac10b-58cc-4372-a567-0e02b2c3d479"),
				Type: "StepSucceeded", ContentType: "application/json",
				Metadata: []byte(`{"correlationId":"c-1"}`), Data: []byte(`{"orderId":"o-1"}`),
			},
			Stream: "task-17", Revision: 3, Position: 123456789, Created: 1_795_000_000_123_456_789,
		},
		{ // High bits set (negative int64 halves), one half zero, long fields.
			ProposedEvent: eslog.ProposedEvent{
				ID:   [16]byte{0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, 0x88},
				Type: strings.Repeat("T", 200), ContentType: "application/octet-stream",
				Metadata: bytes.Repeat([]byte{0}, 300), Data: bytes.Repeat([]byte{0xab}, 70_000),
			},
			Stream: "stream-ünïcode-" + strings.Repeat("x", 130), Revision: 1 << 62, Position: 1<<64 - 1, Created: 99,
		},
		{ // Created before the epoch.
			ProposedEvent: eslog.ProposedEvent{ID: [16]byte{8: 1}, Type: "x", ContentType: "text/plain", Data: []byte("d")},
			Stream:        "$et-x", Position: 1, Created: -1_000_000_000,
		},
	}
}

// TestEncodeMatchesGeneratedTypes decodes each hand-encoded event with the
// generated types and compares it, field by field, with the message the
// generated types build.
func TestEncodeMatchesGeneratedTypes(t *testing.T) {
	for _, asString := range []bool{false, true} {
		for i, e := range encodeCases() {
			t.Run(fmt.Sprintf("case=%d/string=%v", i, asString), func(t *testing.T) {
				enc := eventEncoder{uuidAsString: asString}
				b := enc.encode(&e)
				var got streams.ReadResp
				require.NoError(t, proto.Unmarshal(b, &got))
				want := generatedReadEvent(&e, asString)
				require.True(t, proto.Equal(want, &got), "got %v\nwant %v", &got, want)
				// Same size as the generated encoding: nothing extra, nothing missing.
				require.Len(t, b, proto.Size(want))
				require.Equal(t, len(b), proto.Size(&got))
			})
		}
	}
}

// TestEncodeNeverRewritesSentBytes checks that the messages an encoder
// returned stay as they were while it encodes more, past its buffer.
func TestEncodeNeverRewritesSentBytes(t *testing.T) {
	enc := eventEncoder{}
	cases := encodeCases()
	var sent, copies [][]byte
	for round := 0; round < 50; round++ {
		events := cases
		if round%2 == 1 {
			events = cases[:2] // Pages that fit in the buffer left.
		}
		enc.reserve(events)
		for i := range events {
			b := enc.encode(&events[i])
			sent = append(sent, b)
			copies = append(copies, bytes.Clone(b))
		}
	}
	for i := range sent {
		require.Equal(t, copies[i], sent[i], "message %d", i)
	}
}

func TestServerCodecSendsEncodedBytesAsTheyAre(t *testing.T) {
	c := esdbwire.NewCodec()
	e := encodeCases()[1]
	enc := eventEncoder{}
	b := enc.encode(&e)
	out, err := c.Marshal(&encodedMsg{b: b})
	require.NoError(t, err)
	require.Equal(t, b, out.Materialize())
	// Other messages are the protobuf codec's.
	msg := &streams.ReadResp{Content: &streams.ReadResp_CaughtUp_{CaughtUp: &streams.ReadResp_CaughtUp{}}}
	out, err = c.Marshal(msg)
	require.NoError(t, err)
	var back streams.ReadResp
	require.NoError(t, c.Unmarshal(out, &back))
	require.True(t, proto.Equal(msg, &back))
	require.Equal(t, "proto", c.Name())
}

// BenchmarkEncodeEvent compares the hand encoding of one event with the
// generated types'.
func BenchmarkEncodeEvent(b *testing.B) {
	e := encodeCases()[1]
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		enc := eventEncoder{}
		for i := 0; i < b.N; i++ {
			_ = enc.encode(&e)
		}
	})
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := proto.Marshal(generatedReadEvent(&e, false)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
