package esdbserver

import (
	"encoding/binary"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// encodedMsg is a message already in its protobuf wire form. The server's
// codec sends its bytes as they are, so a read or subscription encodes each
// event once, without building the generated message types (a map, a
// formatted time and eight allocations per event).
type encodedMsg struct {
	b []byte
}

// MarshalWire makes the server's codec (esdbwire.Codec) send the bytes as they
// are. gRPC keeps them until they are written out, after Marshal returns:
// they must not be changed afterwards.
func (m *encodedMsg) MarshalWire() []byte { return m.b }

// Field numbers of the messages readEventAppend encodes, from the
// EventStoreDB client protocol (streams.proto and shared.proto).
const (
	readRespEvent = 1 // ReadResp.event, a ReadEvent

	readEventEvent          = 1 // ReadEvent.event, a RecordedEvent
	readEventCommitPosition = 3 // ReadEvent.commit_position, in the position oneof

	recordedID              = 1 // RecordedEvent.id, a UUID
	recordedStream          = 2 // RecordedEvent.stream_identifier
	recordedRevision        = 3
	recordedPreparePosition = 4
	recordedCommitPosition  = 5
	recordedMetadata        = 6 // map<string, string>
	recordedCustomMetadata  = 7
	recordedData            = 8

	uuidStructured = 1 // UUID.structured, in the value oneof
	uuidString     = 2 // UUID.string, in the value oneof
	uuidMost       = 1 // UUID.Structured.most_significant_bits
	uuidLeast      = 2 // UUID.Structured.least_significant_bits

	streamIdentifierName = 3 // StreamIdentifier.stream_name

	mapKey   = 1
	mapValue = 2
)

// eventEncoder encodes events as ReadResp messages, as the generated types
// would encode them, without building them. It encodes into buffers of its
// own that it never writes twice, since gRPC may still hold a message's
// bytes after sending it.
type eventEncoder struct {
	uuidAsString bool
	buf          []byte
	// ticks holds the creation time of the event being encoded.
	ticks [20]byte
}

// eventOverhead bounds the bytes a ReadResp adds to an event's fields: tags,
// lengths, the UUID, the positions, the metadata keys and the time.
const eventOverhead = 160

// minEncodeBuffer is the least an encoder allocates at a time.
const minEncodeBuffer = 32 << 10

// reserve makes room, in one allocation, for the ReadResps of events.
func (c *eventEncoder) reserve(events []eslog.RecordedEvent) {
	n := 0
	for i := range events {
		e := &events[i]
		n += eventOverhead + len(e.Stream) + len(e.Type) + len(e.ContentType) + len(e.Metadata) + len(e.Data)
	}
	if cap(c.buf)-len(c.buf) < n {
		c.buf = make([]byte, 0, max(n, minEncodeBuffer))
	}
}

// encode returns e as an encoded ReadResp, with its creation time in .NET
// ticks (100 ns) since the Unix epoch, as the clients expect. The bytes stay
// valid for good: the encoder never writes them again.
func (c *eventEncoder) encode(e *eslog.RecordedEvent) []byte {
	created := strconv.AppendInt(c.ticks[:0], e.Created/100, 10)
	total, readEvent, recorded, uuid := c.size(e, created)
	if cap(c.buf)-len(c.buf) < total {
		c.buf = make([]byte, 0, max(total, minEncodeBuffer))
	}
	start := len(c.buf)
	b := c.buf
	b = protowire.AppendTag(b, readRespEvent, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(readEvent))
	b = protowire.AppendTag(b, readEventEvent, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(recorded))

	b = protowire.AppendTag(b, recordedID, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(uuid))
	if c.uuidAsString {
		b = protowire.AppendTag(b, uuidString, protowire.BytesType)
		b = protowire.AppendVarint(b, 36)
		b = appendUUIDString(b, e.ID)
	} else {
		b = protowire.AppendTag(b, uuidStructured, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(structuredSize(e.ID)))
		b = appendVarintField(b, uuidMost, binary.BigEndian.Uint64(e.ID[:8]))
		b = appendVarintField(b, uuidLeast, binary.BigEndian.Uint64(e.ID[8:]))
	}
	b = protowire.AppendTag(b, recordedStream, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(bytesField(streamIdentifierName, len(e.Stream))))
	b = appendStringField(b, streamIdentifierName, e.Stream)
	b = appendVarintField(b, recordedRevision, e.Revision)
	b = appendVarintField(b, recordedPreparePosition, e.Position)
	b = appendVarintField(b, recordedCommitPosition, e.Position)
	b = appendMapEntry(b, metaType, e.Type)
	b = appendMapEntry(b, metaContentType, e.ContentType)
	b = appendMapEntryBytes(b, metaCreated, created)
	if len(e.Metadata) > 0 {
		b = protowire.AppendTag(b, recordedCustomMetadata, protowire.BytesType)
		b = protowire.AppendBytes(b, e.Metadata)
	}
	if len(e.Data) > 0 {
		b = protowire.AppendTag(b, recordedData, protowire.BytesType)
		b = protowire.AppendBytes(b, e.Data)
	}
	// A oneof member is sent even when zero.
	b = protowire.AppendTag(b, readEventCommitPosition, protowire.VarintType)
	b = protowire.AppendVarint(b, e.Position)
	c.buf = b
	return b[start:len(b):len(b)]
}

// size returns the encoded size of e's ReadResp and of the parts that need
// a length: the ReadEvent, the RecordedEvent and the UUID.
func (c *eventEncoder) size(e *eslog.RecordedEvent, created []byte) (total, readEvent, recorded, uuid int) {
	if c.uuidAsString {
		uuid = protowire.SizeTag(uuidString) + protowire.SizeBytes(36)
	} else {
		uuid = protowire.SizeTag(uuidStructured) + protowire.SizeBytes(structuredSize(e.ID))
	}
	recorded = protowire.SizeTag(recordedID) + protowire.SizeBytes(uuid)
	recorded += protowire.SizeTag(recordedStream) + protowire.SizeBytes(bytesField(streamIdentifierName, len(e.Stream)))
	recorded += varintField(recordedRevision, e.Revision)
	recorded += varintField(recordedPreparePosition, e.Position)
	recorded += varintField(recordedCommitPosition, e.Position)
	recorded += mapEntrySize(metaType, len(e.Type))
	recorded += mapEntrySize(metaContentType, len(e.ContentType))
	recorded += mapEntrySize(metaCreated, len(created))
	recorded += bytesField(recordedCustomMetadata, len(e.Metadata))
	recorded += bytesField(recordedData, len(e.Data))
	readEvent = protowire.SizeTag(readEventEvent) + protowire.SizeBytes(recorded)
	readEvent += protowire.SizeTag(readEventCommitPosition) + protowire.SizeVarint(e.Position)
	total = protowire.SizeTag(readRespEvent) + protowire.SizeBytes(readEvent)
	return total, readEvent, recorded, uuid
}

// structuredSize is the size of a UUID.Structured holding id; proto3 omits
// a zero half.
func structuredSize(id [16]byte) int {
	return varintField(uuidMost, binary.BigEndian.Uint64(id[:8])) + varintField(uuidLeast, binary.BigEndian.Uint64(id[8:]))
}

// varintField is the size of a proto3 varint field, which is omitted when
// zero.
func varintField(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// bytesField is the size of a proto3 bytes or string field of n bytes,
// which is omitted when empty.
func bytesField(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// mapEntrySize is the size of one entry, key and value always present, of
// RecordedEvent.metadata.
func mapEntrySize(key string, value int) int {
	n := protowire.SizeTag(mapKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(mapValue) + protowire.SizeBytes(value)
	return protowire.SizeTag(recordedMetadata) + protowire.SizeBytes(n)
}

func appendMapEntry(b []byte, key, value string) []byte {
	n := protowire.SizeTag(mapKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(mapValue) + protowire.SizeBytes(len(value))
	b = protowire.AppendTag(b, recordedMetadata, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, mapKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, mapValue, protowire.BytesType)
	return protowire.AppendString(b, value)
}

func appendMapEntryBytes(b []byte, key string, value []byte) []byte {
	n := protowire.SizeTag(mapKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(mapValue) + protowire.SizeBytes(len(value))
	b = protowire.AppendTag(b, recordedMetadata, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, mapKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, mapValue, protowire.BytesType)
	return protowire.AppendBytes(b, value)
}

// appendUUIDString appends id in its 36-character text form, as
// uuid.UUID.String writes it.
func appendUUIDString(b []byte, id [16]byte) []byte {
	const hex = "0123456789abcdef"
	for i, x := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hex[x>>4], hex[x&0xf])
	}
	return b
}
