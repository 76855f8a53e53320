package esdbwire

import (
	"encoding/binary"
	"time"
	"unicode/utf8"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// ParseUUID reads an id decoded by protobuf, in either of the protocol's
// forms; a missing or malformed one is an InvalidArgument status.
func ParseUUID(id *shared.UUID) ([16]byte, error) {
	var out [16]byte
	switch v := id.GetValue().(type) {
	case *shared.UUID_Structured_:
		binary.BigEndian.PutUint64(out[:8], uint64(v.Structured.GetMostSignificantBits()))
		binary.BigEndian.PutUint64(out[8:], uint64(v.Structured.GetLeastSignificantBits()))
		return out, nil
	case *shared.UUID_String_:
		u, err := uuid.Parse(v.String_)
		if err != nil {
			return out, invalid("event id %q is not a UUID", v.String_)
		}
		return u, nil
	default:
		return out, errIDMissing
	}
}

// Request is one BatchAppend request as the server uses it. Nothing in
// it points into the bytes it was decoded from, which gRPC reuses.
type Request struct {
	// Corr is the correlation id's message as sent, echoed in the answer.
	Corr CorrBytes
	// CorrID is the correlation id, unless CorrErr says why it cannot be
	// read (an InvalidArgument status).
	CorrID  [16]byte
	CorrErr error
	Opts    Options
	HasOpts bool
	Events  []Event
	IsFinal bool
	// types interns event types: a call's appends have few.
	types map[string]string
}

// CorrBytes holds a correlation id's message without an allocation of its
// own when it is short, as both of the protocol's forms are.
type CorrBytes struct {
	short [40]byte
	n     int
	long  []byte
}

func (c *CorrBytes) set(b []byte) {
	if len(b) <= len(c.short) {
		c.n, c.long = copy(c.short[:], b), nil
		return
	}
	c.n, c.long = 0, append([]byte(nil), b...)
}

// Bytes returns the correlation id's message as sent.
func (c *CorrBytes) Bytes() []byte {
	if c.long != nil {
		return c.long
	}
	return c.short[:c.n]
}

// maxInternedTypes bounds Request.types.
const maxInternedTypes = 64

// Options are an append's options; ExpectedField is the field number
// of the expected_stream_position oneof that was set (0 for none).
type Options struct {
	Stream        string
	ExpectedField protowire.Number
	Revision      uint64
	Deadline      time.Time
	HasDeadline   bool
}

// Event is one proposed event; Err is why its id cannot be used (an
// InvalidArgument status).
type Event struct {
	ID          [16]byte
	Err         error
	Type        string
	ContentType string
	Custom      []byte
	Data        []byte
}

// errIDMissing is ParseUUID's error for a missing id, made once: decoding
// starts from it for every id.
var errIDMissing = invalid("event id is missing")

// errUncommon says the fast decoder met an encoding it leaves to protobuf
// (a message field given twice, which protobuf merges, or a wire type it
// does not expect).
var errUncommon = errors.New("uncommon encoding")

// UnmarshalWire decodes a request by hand, or through protobuf when the
// encoding is one the hand decoder does not handle, with the same result.
func (r *Request) UnmarshalWire(data []byte) error {
	if err := r.decode(data); err == nil {
		return nil
	}
	var m streams.BatchAppendReq
	if err := proto.Unmarshal(data, &m); err != nil {
		return errors.Wrap(err, "decode BatchAppend request")
	}
	*r = Request{types: r.types}
	r.fromProto(&m)
	return nil
}

// fromProto converts a request decoded by protobuf.
func (r *Request) fromProto(m *streams.BatchAppendReq) {
	if m.CorrelationId != nil {
		b, _ := proto.Marshal(m.CorrelationId)
		r.Corr.set(b)
	}
	r.CorrID, r.CorrErr = ParseUUID(m.GetCorrelationId())
	r.IsFinal = m.GetIsFinal()
	if o := m.GetOptions(); o != nil {
		r.HasOpts, r.Opts = true, Options{Stream: string(o.GetStreamIdentifier().GetStreamName())}
		switch e := o.GetExpectedStreamPosition().(type) {
		case *streams.BatchAppendReq_Options_StreamPosition:
			r.Opts.ExpectedField, r.Opts.Revision = ExpectStreamPosition, e.StreamPosition
		case *streams.BatchAppendReq_Options_NoStream:
			r.Opts.ExpectedField = ExpectNoStream
		case *streams.BatchAppendReq_Options_Any:
			r.Opts.ExpectedField = ExpectAny
		case *streams.BatchAppendReq_Options_StreamExists:
			r.Opts.ExpectedField = ExpectStreamExists
		}
		if d, ok := o.GetDeadlineOption().(*streams.BatchAppendReq_Options_Deadline_21_10_0); ok && d.Deadline_21_10_0.IsValid() {
			r.Opts.Deadline, r.Opts.HasDeadline = d.Deadline_21_10_0.AsTime(), true
		}
	}
	for _, p := range m.GetProposedMessages() {
		e := Event{Type: p.GetMetadata()[MetaType], ContentType: p.GetMetadata()[MetaContentType]}
		e.ID, e.Err = ParseUUID(p.GetId())
		e.Custom, e.Data = p.GetCustomMetadata(), p.GetData()
		r.Events = append(r.Events, e)
	}
}

// decode is the fast decoder; errUncommon leaves the request to protobuf.
func (r *Request) decode(b []byte) error {
	// The events' slice is reused: nothing keeps it past the request.
	*r = Request{CorrErr: errIDMissing, Events: r.Events[:0], types: r.types}
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
			r.IsFinal, b = v != 0, b[n:]
		case num >= 1 && num <= 3 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || (num != 3 && seen[num]) {
				return errUncommon
			}
			seen[num], b = true, b[n:]
			var err error
			switch num {
			case 1:
				r.Corr.set(v)
				r.CorrID, r.CorrErr, err = decodeUUID(v)
			case 2:
				err = decodeOptions(v, &r.Opts)
				r.HasOpts = true
			case 3:
				var e Event
				e, err = r.decodeEvent(v)
				r.Events = append(r.Events, e)
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
// returns second is ParseUUID's for the same id.
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

func decodeOptions(b []byte, o *Options) error {
	*o = Options{}
	seenStream, seenDeadline := false, false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errUncommon
		}
		b = b[n:]
		switch {
		case num == ExpectStreamPosition && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errUncommon
			}
			o.ExpectedField, o.Revision, b = num, v, b[n:]
		case num >= 1 && num <= 7 && num != ExpectStreamPosition && typ == protowire.BytesType:
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
				o.Stream = name
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
				o.HasDeadline = sec >= -62135596800 && sec <= 253402300799 && nanos >= 0 && nanos < 1e9
				if o.HasDeadline {
					o.Deadline = time.Unix(sec, int64(nanos)).UTC()
				}
			case 7:
				if seenDeadline || !wellFormed(v) {
					return errUncommon
				}
				seenDeadline = true
				o.HasDeadline = false
			default:
				// An Empty, whatever unknown fields it has, as long as they
				// are well formed (protobuf refuses the request otherwise).
				if o.ExpectedField == num || !wellFormed(v) {
					return errUncommon
				}
				// The oneof's last field wins, as in protobuf.
				o.ExpectedField, o.Revision = num, 0
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
func (r *Request) decodeEvent(b []byte) (Event, error) {
	e := Event{Err: errIDMissing}
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
			if e.ID, e.Err, err = decodeUUID(v); err != nil {
				return e, err
			}
		case 2:
			key, value, err := decodeMapEntry(v)
			if err != nil {
				return e, err
			}
			switch string(key) {
			case MetaType:
				e.Type = r.intern(value)
			case MetaContentType:
				e.ContentType = internString(value)
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
		e.Custom, e.Data = buf[:len(custom):len(custom)], buf[len(custom):]
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
func (r *Request) intern(b []byte) string {
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
