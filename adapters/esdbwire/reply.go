package esdbwire

import (
	"encoding/binary"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Reply is one BatchAppendResp as the client reads it. A plain success,
// nearly every answer, is decoded by hand into the fields; anything else
// through protobuf into Full.
type Reply struct {
	Corr     uuid.UUID
	Revision uint64
	NoStream bool
	Commit   uint64
	Prepare  uint64
	Full     *streams.BatchAppendResp
}

// errNotPlain sends an answer to protobuf's decoder.
var errNotPlain = errors.New("not a plain success")

// UnmarshalWire decodes an answer.
func (r *Reply) UnmarshalWire(data []byte) error {
	if r.decode(data) == nil {
		return nil
	}
	*r = Reply{Full: &streams.BatchAppendResp{}}
	if err := proto.Unmarshal(data, r.Full); err != nil {
		return errors.Wrap(err, "decode BatchAppend answer")
	}
	id, err := FromShared(r.Full.GetCorrelationId())
	if err != nil {
		return errors.Wrap(err, "BatchAppend answer with a bad correlation id")
	}
	r.Corr = id
	return nil
}

// FromShared reads an id in either of the protocol's forms.
func FromShared(id *shared.UUID) (uuid.UUID, error) {
	var out uuid.UUID
	switch v := id.GetValue().(type) {
	case *shared.UUID_Structured_:
		binary.BigEndian.PutUint64(out[:8], uint64(v.Structured.GetMostSignificantBits()))
		binary.BigEndian.PutUint64(out[8:], uint64(v.Structured.GetLeastSignificantBits()))
		return out, nil
	case *shared.UUID_String_:
		return uuid.Parse(v.String_)
	default:
		return out, errors.New("no id")
	}
}

// decode reads a plain success: correlation id in structured form, success
// with a revision (or no stream) and a position, once each.
func (r *Reply) decode(b []byte) error {
	*r = Reply{}
	seenCorr, seenSuccess := false, false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errNotPlain
		}
		b = b[n:]
		switch num {
		case respCorrelationID, respSuccess:
			if typ != protowire.BytesType {
				return errNotPlain
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errNotPlain
			}
			b = b[n:]
			var err error
			if num == respCorrelationID {
				if seenCorr {
					return errNotPlain
				}
				seenCorr = true
				r.Corr, err = decodeStructured(v)
			} else {
				if seenSuccess {
					return errNotPlain
				}
				seenSuccess = true
				err = r.decodeSuccess(v)
			}
			if err != nil {
				return err
			}
		case respError:
			return errNotPlain
		default:
			n := skipField(num, typ, b)
			if n < 0 {
				return errNotPlain
			}
			b = b[n:]
		}
	}
	if !seenCorr || !seenSuccess {
		return errNotPlain
	}
	return nil
}

func (r *Reply) decodeSuccess(b []byte) error {
	seenPosition := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errNotPlain
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errNotPlain
			}
			r.Revision, r.NoStream, b = v, false, b[n:]
		case num == 2 && typ == protowire.BytesType:
			_, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errNotPlain
			}
			r.Revision, r.NoStream, b = 0, true, b[n:]
		case num == 3 && typ == protowire.BytesType && !seenPosition:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errNotPlain
			}
			seenPosition, b = true, b[n:]
			r.Commit, r.Prepare = 0, 0
			for len(v) > 0 {
				f, t, m := protowire.ConsumeTag(v)
				if m < 0 || t != protowire.VarintType || f < 1 || f > 2 {
					return errNotPlain
				}
				x, k := protowire.ConsumeVarint(v[m:])
				if k < 0 {
					return errNotPlain
				}
				v = v[m+k:]
				if f == 1 {
					r.Commit = x
				} else {
					r.Prepare = x
				}
			}
		case num == 4 && typ == protowire.BytesType:
			_, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errNotPlain
			}
			r.Commit, r.Prepare, b = 0, 0, b[n:]
		default:
			return errNotPlain
		}
	}
	return nil
}

// decodeStructured reads an id in structured form.
func decodeStructured(b []byte) (uuid.UUID, error) {
	var out uuid.UUID
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return out, errNotPlain
	}
	v, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return out, errNotPlain
	}
	var most, least uint64
	for len(v) > 0 {
		f, t, n := protowire.ConsumeTag(v)
		if n < 0 || t != protowire.VarintType || f < 1 || f > 2 {
			return out, errNotPlain
		}
		x, k := protowire.ConsumeVarint(v[n:])
		if k < 0 {
			return out, errNotPlain
		}
		v = v[n+k:]
		if f == 1 {
			most = x
		} else {
			least = x
		}
	}
	binary.BigEndian.PutUint64(out[:8], most)
	binary.BigEndian.PutUint64(out[8:], least)
	return out, nil
}
