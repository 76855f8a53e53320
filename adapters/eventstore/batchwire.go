package eventstore

import (
	"encoding/binary"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sagaengine/saga/domain"
)

// wireCodec is the BatchAppend call's gRPC codec: the requests are encoded
// and the answers decoded by hand, which costs a few allocations per append
// where reflection-based protobuf cost dozens. The bytes are protobuf's, so
// any server reads them.
type wireCodec struct{ proto encoding.Codec }

func newWireCodec() wireCodec { return wireCodec{proto: encoding.GetCodec(grpcproto.Name)} }

func (c wireCodec) Marshal(v any) ([]byte, error) {
	if f, ok := v.(*batchFrame); ok {
		return f.b, nil
	}
	return c.proto.Marshal(v)
}

func (c wireCodec) Unmarshal(data []byte, v any) error {
	if r, ok := v.(*batchReply); ok {
		return r.unmarshalWire(data)
	}
	return c.proto.Unmarshal(data, v)
}

// Name is protobuf's: the codec reads and writes the same bytes.
func (wireCodec) Name() string { return grpcproto.Name }

// batchFrame is one encoded BatchAppendReq. gRPC holds its bytes until they
// are written, so each frame has bytes of its own.
type batchFrame struct{ b []byte }

// Field numbers of the messages a request is made of.
const (
	reqCorrelationID protowire.Number = 1
	reqOptions       protowire.Number = 2
	reqProposed      protowire.Number = 3
	reqIsFinal       protowire.Number = 4
)

// batchFrames is an append as BatchAppend requests: one, or chunks of at
// most maxChunkBytes of events, the first with the options and the last
// final. The deadline is sent relative, so that the clocks of client and
// server need not agree.
func batchFrames(id uuid.UUID, stream string, expected domain.ExpectedRevision, events []esdb.EventData, deadline time.Time) []batchFrame {
	var scratch [128]byte
	opts := scratch[:0]
	opts = protowire.AppendTag(opts, 1, protowire.BytesType)
	opts = protowire.AppendVarint(opts, uint64(protowire.SizeTag(3)+protowire.SizeBytes(len(stream))))
	opts = protowire.AppendTag(opts, 3, protowire.BytesType)
	opts = protowire.AppendString(opts, stream)
	switch rev, ok := expected.Revision(); {
	case ok:
		opts = protowire.AppendTag(opts, 2, protowire.VarintType)
		opts = protowire.AppendVarint(opts, rev)
	case expected.IsNoStream():
		opts = protowire.AppendTag(opts, 3, protowire.BytesType)
		opts = protowire.AppendVarint(opts, 0)
	default:
		opts = protowire.AppendTag(opts, 4, protowire.BytesType)
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

	var frames []batchFrame
	start := 0
	for start < len(events) || len(frames) == 0 {
		// The events of this chunk: at least one, at most maxChunkBytes.
		end, size := start, 0
		for end < len(events) {
			n := encodedSize(&events[end])
			if size > 0 && size+n > maxChunkBytes {
				break
			}
			size += n
			end++
		}
		first := len(frames) == 0
		b := make([]byte, 0, 64+len(opts)+size+len(stream))
		b = appendUUID(b, reqCorrelationID, id)
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
		frames = append(frames, batchFrame{b: b})
		start = end
	}
	return frames
}

// appendUUID appends an id as a field, in the protocol's structured form,
// which costs less to encode and decode than its string form.
func appendUUID(b []byte, field protowire.Number, id uuid.UUID) []byte {
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
		idSize = len(appendUUID(scratch[:0], 1, e.EventID))
	}
	typeEntry, ctEntry := entry("type", e.EventType), entry("content-type", contentType)
	size := idSize + protowire.SizeTag(2) + protowire.SizeBytes(typeEntry) + protowire.SizeTag(2) + protowire.SizeBytes(ctEntry)
	if len(e.Metadata) > 0 {
		size += protowire.SizeTag(3) + protowire.SizeBytes(len(e.Metadata))
	}
	if len(e.Data) > 0 {
		size += protowire.SizeTag(4) + protowire.SizeBytes(len(e.Data))
	}
	b = protowire.AppendTag(b, reqProposed, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	b = appendUUID(b, 1, e.EventID)
	b = appendEntry(b, typeEntry, "type", e.EventType)
	b = appendEntry(b, ctEntry, "content-type", contentType)
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

// batchReply is one BatchAppendResp. A plain success, nearly every answer,
// is decoded by hand into the fields; anything else through protobuf into
// full.
type batchReply struct {
	corr     uuid.UUID
	revision uint64
	noStream bool
	commit   uint64
	prepare  uint64
	full     *streams.BatchAppendResp
}

// errNotPlain sends an answer to protobuf's decoder.
var errNotPlain = errors.New("not a plain success")

func (r *batchReply) unmarshalWire(data []byte) error {
	if r.decode(data) == nil {
		return nil
	}
	*r = batchReply{full: &streams.BatchAppendResp{}}
	if err := proto.Unmarshal(data, r.full); err != nil {
		return errors.Wrap(err, "decode BatchAppend answer")
	}
	id, err := fromShared(r.full.GetCorrelationId())
	if err != nil {
		return errors.Wrap(err, "BatchAppend answer with a bad correlation id")
	}
	r.corr = id
	return nil
}

// decode reads a plain success: correlation id in structured form, success
// with a revision (or no stream) and a position, once each.
func (r *batchReply) decode(b []byte) error {
	*r = batchReply{}
	seenCorr, seenSuccess := false, false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errNotPlain
		}
		b = b[n:]
		switch num {
		case 1, 3:
			if typ != protowire.BytesType {
				return errNotPlain
			}
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errNotPlain
			}
			b = b[n:]
			var err error
			if num == 1 {
				if seenCorr {
					return errNotPlain
				}
				seenCorr = true
				r.corr, err = decodeStructured(v)
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
		case 2:
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

func (r *batchReply) decodeSuccess(b []byte) error {
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
			r.revision, r.noStream, b = v, false, b[n:]
		case num == 2 && typ == protowire.BytesType:
			_, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errNotPlain
			}
			r.revision, r.noStream, b = 0, true, b[n:]
		case num == 3 && typ == protowire.BytesType && !seenPosition:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errNotPlain
			}
			seenPosition, b = true, b[n:]
			r.commit, r.prepare = 0, 0
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
					r.commit = x
				} else {
					r.prepare = x
				}
			}
		case num == 4 && typ == protowire.BytesType:
			_, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errNotPlain
			}
			r.commit, r.prepare, b = 0, 0, b[n:]
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

// result reads an append's answer as the official client reads Append's:
// the same WriteResult on success, and the same error codes and messages on
// failure.
func (r *batchReply) result() (*esdb.WriteResult, error) {
	if r.full != nil {
		return fromBatchResponse(r.full)
	}
	res := &esdb.WriteResult{NextExpectedVersion: r.revision, CommitPosition: r.commit, PreparePosition: r.prepare}
	if r.noStream {
		// The official client reports 1 here; keep its answer.
		res.NextExpectedVersion = 1
	}
	return res, nil
}

// skipField consumes an unknown field, or returns a negative length where
// protobuf refuses the field (a number out of range, a truncated value).
func skipField(num protowire.Number, typ protowire.Type, b []byte) int {
	if !num.IsValid() {
		return -1
	}
	return protowire.ConsumeFieldValue(num, typ, b)
}
