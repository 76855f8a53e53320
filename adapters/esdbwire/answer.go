package esdbwire

import (
	"encoding/binary"

	"google.golang.org/protobuf/encoding/protowire"
)

// Answer is what a BatchAppendResp says of one append, as the server
// encodes it.
type Answer struct {
	// Corr is the correlation id's message as the client sent it.
	Corr []byte
	// Stream, ExpectedField and Revision echo the append's options.
	Stream        string
	ExpectedField protowire.Number
	Revision      uint64
	// Error, when set, is the encoded google.rpc.Status the append failed
	// with; the fields below are then unused.
	Error []byte
	// CurrentRevision is the stream's revision after the append, unless
	// NoStream.
	CurrentRevision uint64
	NoStream        bool
	// Commit and Prepare are the append's position; both zero sends an
	// empty position.
	Commit, Prepare uint64
}

// Encode encodes the answer.
func (a *Answer) Encode() []byte {
	b := make([]byte, 0, 48+len(a.Corr)+len(a.Stream)+len(a.Error))
	b = protowire.AppendTag(b, respCorrelationID, protowire.BytesType)
	b = protowire.AppendBytes(b, a.Corr)
	if a.Error != nil {
		b = protowire.AppendTag(b, respError, protowire.BytesType)
		b = protowire.AppendBytes(b, a.Error)
	} else {
		var pos [2 * (1 + binary.MaxVarintLen64)]byte
		p := pos[:0]
		if a.Commit != 0 || a.Prepare != 0 {
			p = protowire.AppendTag(p, 1, protowire.VarintType)
			p = protowire.AppendVarint(p, a.Commit)
			p = protowire.AppendTag(p, 2, protowire.VarintType)
			p = protowire.AppendVarint(p, a.Prepare)
		}
		size := protowire.SizeTag(3) + protowire.SizeBytes(len(p))
		if a.NoStream {
			size += protowire.SizeTag(2) + protowire.SizeBytes(0)
		} else {
			size += protowire.SizeTag(1) + protowire.SizeVarint(a.CurrentRevision)
		}
		b = protowire.AppendTag(b, respSuccess, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		if a.NoStream {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendVarint(b, 0)
		} else {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, a.CurrentRevision)
		}
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
	}
	b = protowire.AppendTag(b, respStream, protowire.BytesType)
	if a.Stream == "" {
		b = protowire.AppendVarint(b, 0)
	} else {
		b = protowire.AppendVarint(b, uint64(protowire.SizeTag(3)+protowire.SizeBytes(len(a.Stream))))
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, a.Stream)
	}
	switch field := a.ExpectedField + 3; a.ExpectedField {
	case ExpectStreamPosition:
		b = protowire.AppendTag(b, field, protowire.VarintType)
		b = protowire.AppendVarint(b, a.Revision)
	case ExpectNoStream, ExpectStreamExists:
		b = protowire.AppendTag(b, field, protowire.BytesType)
		b = protowire.AppendVarint(b, 0)
	default:
		b = protowire.AppendTag(b, ExpectAny+3, protowire.BytesType)
		b = protowire.AppendVarint(b, 0)
	}
	return b
}
