package esdbserver

import (
	"encoding/binary"
	"time"
	"unicode/utf8"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// wireCodec is the server's gRPC codec: protobuf as usual, except for
// BatchAppend's requests and answers, which it decodes and encodes by hand.
// Reflection-based protobuf made an append's request cost dozens of
// allocations (a map, oneof wrappers, a message per id); by hand it is a few.
type wireCodec struct{ proto encoding.Codec }

func newWireCodec() wireCodec { return wireCodec{proto: encoding.GetCodec(grpcproto.Name)} }

// wireMarshaler is a message the codec encodes by hand.
type wireMarshaler interface{ marshalWire() []byte }

// wireUnmarshaler is a message the codec decodes by hand.
type wireUnmarshaler interface{ unmarshalWire(data []byte) error }

func (c wireCodec) Marshal(v any) ([]byte, error) {
	if m, ok := v.(wireMarshaler); ok {
		return m.marshalWire(), nil
	}
	return c.proto.Marshal(v)
}

func (c wireCodec) Unmarshal(data []byte, v any) error {
	if m, ok := v.(wireUnmarshaler); ok {
		return m.unmarshalWire(data)
	}
	return c.proto.Unmarshal(data, v)
}

// Name is protobuf's: the codec reads and writes the same bytes.
func (wireCodec) Name() string { return grpcproto.Name }

// batchRequest is one BatchAppend request as the server uses it. Nothing in
// it points into the bytes it was decoded from, which gRPC reuses.
type batchRequest struct {
	// corr is the correlation id's message as sent, echoed in the answer.
	corr    corrBytes
	corrID  [16]byte
	corrErr error
	opts    batchOptions
	hasOpts bool
	events  []batchEvent
	isFinal bool
	// types interns event types: a call's appends have few.
	types map[string]string
}

// corrBytes holds a correlation id's message without an allocation of its
// own when it is short, as both of the protocol's forms are.
type corrBytes struct {
	short [40]byte
	n     int
	long  []byte
}

func (c *corrBytes) set(b []byte) {
	if len(b) <= len(c.short) {
		c.n, c.long = copy(c.short[:], b), nil
		return
	}
	c.n, c.long = 0, append([]byte(nil), b...)
}

func (c *corrBytes) bytes() []byte {
	if c.long != nil {
		return c.long
	}
	return c.short[:c.n]
}

// maxInternedTypes bounds batchRequest.types.
const maxInternedTypes = 64

// batchOptions are an append's options; expectedField is the field number
// of the expected_stream_position oneof that was set (0 for none).
type batchOptions struct {
	stream        string
	expectedField protowire.Number
	revision      uint64
	deadline      time.Time
	hasDeadline   bool
}

// batchEvent is one proposed event; err is why its id cannot be used.
type batchEvent struct {
	id          [16]byte
	err         error
	typ         string
	contentType string
	custom      []byte
	data        []byte
}

// Field numbers of BatchAppendReq.Options.expected_stream_position, which
// BatchAppendResp echoes at field numbers three higher.
const (
	expectStreamPosition protowire.Number = 2
	expectNoStream       protowire.Number = 3
	expectAny            protowire.Number = 4
	expectStreamExists   protowire.Number = 5
)

// errIDMissing is parseUUID's error for a missing id, made once: decoding
// starts from it for every id.
var errIDMissing = invalid("event id is missing")

// errUncommon says the fast decoder met an encoding it leaves to protobuf
// (a message field given twice, which protobuf merges, or a wire type it
// does not expect).
var errUncommon = errors.New("uncommon encoding")

// unmarshalWire decodes a request by hand, or through protobuf when the
// encoding is one the hand decoder does not handle, with the same result.
func (r *batchRequest) unmarshalWire(data []byte) error {
	if err := r.decode(data); err == nil {
		return nil
	}
	var m streams.BatchAppendReq
	if err := proto.Unmarshal(data, &m); err != nil {
		return errors.Wrap(err, "decode BatchAppend request")
	}
	*r = batchRequest{types: r.types}
	r.fromProto(&m)
	return nil
}

// fromProto converts a request decoded by protobuf.
func (r *batchRequest) fromProto(m *streams.BatchAppendReq) {
	if m.CorrelationId != nil {
		b, _ := proto.Marshal(m.CorrelationId)
		r.corr.set(b)
	}
	r.corrID, r.corrErr = parseUUID(m.GetCorrelationId())
	r.isFinal = m.GetIsFinal()
	if o := m.GetOptions(); o != nil {
		r.hasOpts, r.opts = true, batchOptions{stream: string(o.GetStreamIdentifier().GetStreamName())}
		switch e := o.GetExpectedStreamPosition().(type) {
		case *streams.BatchAppendReq_Options_StreamPosition:
			r.opts.expectedField, r.opts.revision = expectStreamPosition, e.StreamPosition
		case *streams.BatchAppendReq_Options_NoStream:
			r.opts.expectedField = expectNoStream
		case *streams.BatchAppendReq_Options_Any:
			r.opts.expectedField = expectAny
		case *streams.BatchAppendReq_Options_StreamExists:
			r.opts.expectedField = expectStreamExists
		}
		if d, ok := o.GetDeadlineOption().(*streams.BatchAppendReq_Options_Deadline_21_10_0); ok && d.Deadline_21_10_0.IsValid() {
			r.opts.deadline, r.opts.hasDeadline = d.Deadline_21_10_0.AsTime(), true
		}
	}
	for _, p := range m.GetProposedMessages() {
		e := batchEvent{typ: p.GetMetadata()[metaType], contentType: p.GetMetadata()[metaContentType]}
		e.id, e.err = parseUUID(p.GetId())
		e.custom, e.data = p.GetCustomMetadata(), p.GetData()
		r.events = append(r.events, e)
	}
}

// decode is the fast decoder; errUncommon leaves the request to protobuf.
func (r *batchRequest) decode(b []byte) error {
	// The events' slice is reused: nothing keeps it past the request.
	*r = batchRequest{corrErr: errIDMissing, events: r.events[:0], types: r.types}
	var seen [4]bool
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errUncommon
		}
		b = b[n:]
		switch {
		case num == 4 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errUncommon
			}
			r.isFinal, b = v != 0, b[n:]
		case num >= 1 && num <= 3 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || (num != 3 && seen[num]) {
				return errUncommon
			}
			seen[num], b = true, b[n:]
			var err error
			switch num {
			case 1:
				r.corr.set(v)
				r.corrID, r.corrErr, err = decodeUUID(v)
			case 2:
				err = decodeOptions(v, &r.opts)
				r.hasOpts = true
			case 3:
				var e batchEvent
				e, err = r.decodeEvent(v)
				r.events = append(r.events, e)
			}
			if err != nil {
				return err
			}
		case num >= 1 && num <= 4:
			return errUncommon
		default:
			n := skipField(num, typ, b)
			if n < 0 {
				return errUncommon
			}
			b = b[n:]
		}
	}
	return nil
}

// decodeUUID reads an id in either of the protocol's forms; the error it
// returns second is parseUUID's for the same id.
func decodeUUID(b []byte) ([16]byte, error, error) {
	var out [16]byte
	var structured, str []byte
	kind := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || num < 1 || num > 2 {
			return out, nil, errUncommon
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 || kind != 0 {
			// A second form, or the same one again: protobuf checks every
			// one of them (an invalid string before a valid one refuses the
			// request), so it decides.
			return out, nil, errUncommon
		}
		b = b[n+m:]
		kind = int(num)
		if num == 1 {
			structured = v
		} else {
			str = v
		}
	}
	switch kind {
	case 1:
		var most, least uint64
		for b := structured; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 || typ != protowire.VarintType || num < 1 || num > 2 {
				return out, nil, errUncommon
			}
			v, m := protowire.ConsumeVarint(b[n:])
			if m < 0 {
				return out, nil, errUncommon
			}
			b = b[n+m:]
			if num == 1 {
				most = v
			} else {
				least = v
			}
		}
		putUUID(&out, most, least)
		return out, nil, nil
	case 2:
		if !utf8.Valid(str) {
			return out, nil, errUncommon
		}
		u, err := uuid.ParseBytes(str)
		if err != nil {
			return out, invalid("event id %q is not a UUID", str), nil
		}
		return u, nil, nil
	default:
		return out, errIDMissing, nil
	}
}

func putUUID(out *[16]byte, most, least uint64) {
	for i := 0; i < 8; i++ {
		out[i] = byte(most >> (56 - 8*i))
		out[8+i] = byte(least >> (56 - 8*i))
	}
}

func decodeOptions(b []byte, o *batchOptions) error {
	*o = batchOptions{}
	seenStream, seenDeadline := false, false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errUncommon
		}
		b = b[n:]
		switch {
		case num == expectStreamPosition && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errUncommon
			}
			o.expectedField, o.revision, b = num, v, b[n:]
		case num >= 1 && num <= 7 && num != expectStreamPosition && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errUncommon
			}
			b = b[n:]
			switch num {
			case 1:
				if seenStream {
					return errUncommon
				}
				seenStream = true
				name, err := decodeStreamName(v)
				if err != nil {
					return err
				}
				o.stream = name
			case 6:
				if seenDeadline {
					return errUncommon
				}
				seenDeadline = true
				sec, nanos, err := decodeTimestamp(v)
				if err != nil {
					return err
				}
				// As timestamppb's IsValid.
				o.hasDeadline = sec >= -62135596800 && sec <= 253402300799 && nanos >= 0 && nanos < 1e9
				if o.hasDeadline {
					o.deadline = time.Unix(sec, int64(nanos)).UTC()
				}
			case 7:
				if seenDeadline || !wellFormed(v) {
					return errUncommon
				}
				seenDeadline = true
				o.hasDeadline = false
			default:
				// An Empty, whatever unknown fields it has, as long as they
				// are well formed (protobuf refuses the request otherwise).
				if o.expectedField == num || !wellFormed(v) {
					return errUncommon
				}
				// The oneof's last field wins, as in protobuf.
				o.expectedField, o.revision = num, 0
			}
		case num >= 1 && num <= 7:
			return errUncommon
		default:
			n := skipField(num, typ, b)
			if n < 0 {
				return errUncommon
			}
			b = b[n:]
		}
	}
	return nil
}

func decodeStreamName(b []byte) (string, error) {
	var name []byte
	seen := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", errUncommon
		}
		b = b[n:]
		if num == 3 {
			if typ != protowire.BytesType || seen {
				return "", errUncommon
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", errUncommon
			}
			name, seen, b = v, true, b[n:]
			continue
		}
		n = skipField(num, typ, b)
		if n < 0 {
			return "", errUncommon
		}
		b = b[n:]
	}
	return string(name), nil
}

func decodeTimestamp(b []byte) (int64, int32, error) {
	var sec, nanos uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.VarintType || num < 1 || num > 2 {
			return 0, 0, errUncommon
		}
		v, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			return 0, 0, errUncommon
		}
		b = b[n+m:]
		if num == 1 {
			sec = v
		} else {
			nanos = v
		}
	}
	return int64(sec), int32(nanos), nil
}

// decodeEvent reads a proposed event, copying what it keeps.
func (r *batchRequest) decodeEvent(b []byte) (batchEvent, error) {
	e := batchEvent{err: errIDMissing}
	var custom, data []byte
	seenID := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return e, errUncommon
		}
		b = b[n:]
		if num < 1 || num > 4 {
			n := skipField(num, typ, b)
			if n < 0 {
				return e, errUncommon
			}
			b = b[n:]
			continue
		}
		if typ != protowire.BytesType {
			return e, errUncommon
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return e, errUncommon
		}
		b = b[n:]
		switch num {
		case 1:
			if seenID {
				return e, errUncommon
			}
			seenID = true
			var err error
			if e.id, e.err, err = decodeUUID(v); err != nil {
				return e, err
			}
		case 2:
			key, value, err := decodeMapEntry(v)
			if err != nil {
				return e, err
			}
			switch string(key) {
			case metaType:
				e.typ = r.intern(value)
			case metaContentType:
				e.contentType = internString(value)
			}
		case 3:
			custom = v
		case 4:
			data = v
		}
	}
	if len(custom)+len(data) > 0 {
		buf := make([]byte, len(custom)+len(data))
		copy(buf, custom)
		copy(buf[len(custom):], data)
		e.custom, e.data = buf[:len(custom):len(custom)], buf[len(custom):]
	}
	return e, nil
}

func decodeMapEntry(b []byte) ([]byte, []byte, error) {
	var key, value []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, nil, errUncommon
		}
		b = b[n:]
		if num != 1 && num != 2 {
			n := skipField(num, typ, b)
			if n < 0 {
				return nil, nil, errUncommon
			}
			b = b[n:]
			continue
		}
		if typ != protowire.BytesType {
			return nil, nil, errUncommon
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 || !utf8.Valid(v) {
			return nil, nil, errUncommon
		}
		b = b[n:]
		if num == 1 {
			key = v
		} else {
			value = v
		}
	}
	return key, value, nil
}

// intern returns an event type as a string, the same string each time.
func (r *batchRequest) intern(b []byte) string {
	if s, ok := r.types[string(b)]; ok {
		return s
	}
	s := string(b)
	if r.types == nil {
		r.types = map[string]string{}
	}
	if len(r.types) < maxInternedTypes {
		r.types[s] = s
	}
	return s
}

// internString avoids an allocation for the content types nearly every
// event has.
func internString(b []byte) string {
	switch string(b) {
	case "application/json":
		return "application/json"
	case "application/octet-stream":
		return "application/octet-stream"
	}
	return string(b)
}

// proposedEvent converts an event with Append's checks (toProposed's).
func (e *batchEvent) proposedEvent() (eslog.ProposedEvent, error) {
	if e.err != nil {
		return eslog.ProposedEvent{}, e.err
	}
	if e.typ == "" {
		return eslog.ProposedEvent{}, invalid("event %s has no %q metadata", uuid.UUID(e.id), metaType)
	}
	contentType := e.contentType
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	return eslog.ProposedEvent{ID: e.id, Type: e.typ, ContentType: contentType, Metadata: e.custom, Data: e.data}, nil
}

// batchAnswer is one encoded BatchAppendResp.
type batchAnswer struct{ b []byte }

func (a *batchAnswer) marshalWire() []byte { return a.b }

// batchResponse encodes the answer to one append: success with the
// stream's revision and the position, or an error status whose details say
// what happened, as EventStoreDB's own (WrongExpectedVersion, StreamDeleted,
// AccessDenied, BadRequest, Timeout). It echoes the correlation id as sent,
// the stream and the expected revision.
func batchResponse(a *chunkedAppend, res eslog.WriteResult, err error) []byte {
	var errMsg []byte
	if err != nil {
		errMsg, _ = proto.Marshal(batchStatus(err).Proto())
	}
	corr := a.corr.bytes()
	b := make([]byte, 0, 48+len(corr)+len(a.name)+len(errMsg))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, corr)
	if err != nil {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, errMsg)
	} else {
		var pos [2 * (1 + binary.MaxVarintLen64)]byte
		p := pos[:0]
		if res.Position != 0 {
			p = protowire.AppendTag(p, 1, protowire.VarintType)
			p = protowire.AppendVarint(p, res.Position)
			p = protowire.AppendTag(p, 2, protowire.VarintType)
			p = protowire.AppendVarint(p, res.Position)
		}
		size := protowire.SizeTag(3) + protowire.SizeBytes(len(p))
		if res.Revision == eslog.NoStream {
			size += protowire.SizeTag(2) + protowire.SizeBytes(0)
		} else {
			size += protowire.SizeTag(1) + protowire.SizeVarint(uint64(res.Revision))
		}
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		if res.Revision == eslog.NoStream {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendVarint(b, 0)
		} else {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(res.Revision))
		}
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
	}
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	if a.name == "" {
		b = protowire.AppendVarint(b, 0)
	} else {
		b = protowire.AppendVarint(b, uint64(protowire.SizeTag(3)+protowire.SizeBytes(len(a.name))))
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, a.name)
	}
	switch field := a.expectedField + 3; a.expectedField {
	case expectStreamPosition:
		b = protowire.AppendTag(b, field, protowire.VarintType)
		b = protowire.AppendVarint(b, a.revision)
	case expectNoStream, expectStreamExists:
		b = protowire.AppendTag(b, field, protowire.BytesType)
		b = protowire.AppendVarint(b, 0)
	default:
		b = protowire.AppendTag(b, expectAny+3, protowire.BytesType)
		b = protowire.AppendVarint(b, 0)
	}
	return b
}

// skipField consumes an unknown field, or returns a negative length where
// protobuf refuses the field (a number out of range, a truncated value).
// wellFormed reports whether b is a sequence of well-formed fields, as
// protobuf requires of a message whose fields it does not look into.
func wellFormed(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		m := skipField(num, typ, b[n:])
		if m < 0 {
			return false
		}
		b = b[n+m:]
	}
	return true
}

func skipField(num protowire.Number, typ protowire.Type, b []byte) int {
	if !num.IsValid() {
		return -1
	}
	return protowire.ConsumeFieldValue(num, typ, b)
}
