package esdbwire

import (
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// Marshaler is a message the codec encodes by hand.
type Marshaler interface{ MarshalWire() []byte }

// Unmarshaler is a message the codec decodes by hand. It must keep none of
// data's bytes: gRPC reuses its receive buffers once Unmarshal returns.
type Unmarshaler interface{ UnmarshalWire(data []byte) error }

// Codec is a gRPC codec: protobuf as usual, except for messages that are
// Marshalers or Unmarshalers, which encode or decode themselves.
type Codec struct{ proto encoding.CodecV2 }

// NewCodec returns the codec, to be forced on a call (grpc.ForceCodecV2)
// or a server (grpc.ForceServerCodecV2).
func NewCodec() Codec { return Codec{proto: encoding.GetCodecV2(grpcproto.Name)} }

// Marshal encodes v.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(Marshaler); ok {
		return mem.BufferSlice{mem.SliceBuffer(m.MarshalWire())}, nil
	}
	return c.proto.Marshal(v)
}

// Unmarshal decodes data into v. A message that arrived in one buffer, as
// most do, is decoded where it lies rather than copied first.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(Unmarshaler)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return m.UnmarshalWire(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return m.UnmarshalWire(buf.ReadOnlyData())
}

// Name is protobuf's: the codec reads and writes the same bytes.
func (Codec) Name() string { return grpcproto.Name }

// Encoded is a message already in its wire form. gRPC holds its bytes
// until they are written, after Marshal returns: they must not be changed
// afterwards.
type Encoded struct{ B []byte }

// MarshalWire returns the bytes as they are.
func (e *Encoded) MarshalWire() []byte { return e.B }

// skipField consumes an unknown field, or returns a negative length where
// protobuf refuses the field (a number out of range, a truncated value).
func skipField(num protowire.Number, typ protowire.Type, b []byte) int {
	if !num.IsValid() {
		return -1
	}
	return protowire.ConsumeFieldValue(num, typ, b)
}

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
