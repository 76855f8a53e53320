package esdbwire

import (
	"encoding/binary"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sagaengine/saga/domain"
)

// EventOverhead is a generous estimate of what an event adds to a request
// besides its data, metadata and type: id, content type, framing.
const EventOverhead = 128

// EncodedSize estimates an event's size in a BatchAppend request.
func EncodedSize(e *esdb.EventData) int {
	return len(e.Data) + len(e.Metadata) + len(e.EventType) + EventOverhead
}

// AppendRequests encodes an append as BatchAppend requests: one, or chunks
// of at most maxChunk bytes of events (at least one event each), the first
// with the options and the last final. The deadline is sent relative, so
// that the clocks of client and server need not agree. Each request has
// bytes of its own: gRPC holds them until they are written.
func AppendRequests(id uuid.UUID, stream string, expected domain.ExpectedRevision, events []esdb.EventData, deadline time.Time, maxChunk int) []Encoded {
	var scratch [128]byte
	opts := scratch[:0]
	opts = protowire.AppendTag(opts, 1, protowire.BytesType)
	opts = protowire.AppendVarint(opts, uint64(protowire.SizeTag(3)+protowire.SizeBytes(len(stream))))
	opts = protowire.AppendTag(opts, 3, protowire.BytesType)
	opts = protowire.AppendString(opts, stream)
	switch rev, ok := expected.Revision(); {
	case ok:
		opts = protowire.AppendTag(opts, ExpectStreamPosition, protowire.VarintType)
		opts = protowire.AppendVarint(opts, rev)
	case expected.IsNoStream():
		opts = protowire.AppendTag(opts, ExpectNoStream, protowire.BytesType)
		opts = protowire.AppendVarint(opts, 0)
	default:
		opts = protowire.AppendTag(opts, ExpectAny, protowire.BytesType)
		opts = protowire.AppendVarint(opts, 0)
	}
	// A google.protobuf.Duration, as durationpb.New makes it.
	d := time.Until(deadline)
	var dur [2 + 2*binary.MaxVarintLen64]byte
	du := dur[:0]
	if secs := int64(d / time.Second); secs != 0 {
		du = protowire.AppendTag(du, 1, protowire.VarintType)
		du = protowire.AppendVarint(du, uint64(secs))
	}
	if nanos := int32(d % time.Second); nanos != 0 {
		du = protowire.AppendTag(du, 2, protowire.VarintType)
		du = protowire.AppendVarint(du, uint64(int64(nanos)))
	}
	opts = protowire.AppendTag(opts, 7, protowire.BytesType)
	opts = protowire.AppendBytes(opts, du)

	var frames []Encoded
	start := 0
	for start < len(events) || len(frames) == 0 {
		// The events of this chunk: at least one, at most maxChunk bytes.
		end, size := start, 0
		for end < len(events) {
			n := EncodedSize(&events[end])
			if size > 0 && size+n > maxChunk {
				break
			}
			size += n
			end++
		}
		first := len(frames) == 0
		b := make([]byte, 0, 64+len(opts)+size+len(stream))
		b = AppendUUID(b, reqCorrelationID, id)
		if first {
			b = protowire.AppendTag(b, reqOptions, protowire.BytesType)
			b = protowire.AppendBytes(b, opts)
		}
		for i := start; i < end; i++ {
			b = appendProposed(b, &events[i])
		}
		if end == len(events) {
			b = protowire.AppendTag(b, reqIsFinal, protowire.VarintType)
			b = protowire.AppendVarint(b, 1)
		}
		frames = append(frames, Encoded{B: b})
		start = end
	}
	return frames
}

// AppendUUID appends an id as a field, in the protocol's structured form,
// which costs less to encode and decode than its string form.
func AppendUUID(b []byte, field protowire.Number, id uuid.UUID) []byte {
	most, least := binary.BigEndian.Uint64(id[:8]), binary.BigEndian.Uint64(id[8:])
	inner := 0
	if most != 0 {
		inner += 1 + protowire.SizeVarint(most)
	}
	if least != 0 {
		inner += 1 + protowire.SizeVarint(least)
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(1)+protowire.SizeBytes(inner)))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	if most != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, most)
	}
	if least != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, least)
	}
	return b
}

// appendProposed appends an event as the official client converts it for
// Append: the type and content type as metadata, the custom metadata, the
// data.
func appendProposed(b []byte, e *esdb.EventData) []byte {
	contentType := "application/octet-stream"
	if e.ContentType == esdb.ContentTypeJson {
		contentType = "application/json"
	}
	entry := func(k, v string) int {
		return protowire.SizeTag(1) + protowire.SizeBytes(len(k)) + protowire.SizeTag(2) + protowire.SizeBytes(len(v))
	}
	idSize := 0
	{
		var scratch [40]byte
		idSize = len(AppendUUID(scratch[:0], 1, e.EventID))
	}
	typeEntry, ctEntry := entry(MetaType, e.EventType), entry(MetaContentType, contentType)
	size := idSize + protowire.SizeTag(2) + protowire.SizeBytes(typeEntry) + protowire.SizeTag(2) + protowire.SizeBytes(ctEntry)
	if len(e.Metadata) > 0 {
		size += protowire.SizeTag(3) + protowire.SizeBytes(len(e.Metadata))
	}
	if len(e.Data) > 0 {
		size += protowire.SizeTag(4) + protowire.SizeBytes(len(e.Data))
	}
	b = protowire.AppendTag(b, reqProposed, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	b = AppendUUID(b, 1, e.EventID)
	b = appendEntry(b, typeEntry, MetaType, e.EventType)
	b = appendEntry(b, ctEntry, MetaContentType, contentType)
	if len(e.Metadata) > 0 {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, e.Metadata)
	}
	if len(e.Data) > 0 {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, e.Data)
	}
	return b
}

func appendEntry(b []byte, size int, k, v string) []byte {
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, k)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendString(b, v)
}
