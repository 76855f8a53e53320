package kafka

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// DefaultMaxDeadLetterBytes bounds the record a dead letter copies whole
// (key, value and headers): a larger one is dead-lettered by reference.
// It is the orders' default size limit and a stock broker's
// message.max.bytes, so that an oversized order never meets a dead-letter
// topic too small for it.
const DefaultMaxDeadLetterBytes = 1 << 20

// Bounds of a dead letter by reference.
const (
	// DeadLetterPrefixBytes is how much of the value a dead letter by
	// reference keeps.
	DeadLetterPrefixBytes = 4 << 10
	// maxReferenceKeyBytes and maxReferenceHeaderBytes bound the key and
	// the original headers it keeps; headers beyond are left out.
	maxReferenceKeyBytes    = 1 << 10
	maxReferenceHeaderBytes = 16 << 10
)

// deadLetterRecord is the dead letter of a record: a copy, byte for byte
// with its headers, plus the reason and source; or, when the copy would be
// over maxBytes (or byReference is set, after the broker refused the copy
// as too large), a dead letter by reference: the source, the value's size
// (HeaderDeadLetterSize), its first DeadLetterPrefixBytes and the reason;
// byRef says which.
func deadLetterRecord(key, value []byte, headers []kgo.RecordHeader, reason, source string, maxBytes int, byReference bool) (rec *kgo.Record, byRef bool) {
	size := len(key) + len(value) + headersSize(headers)
	rec = &kgo.Record{Topic: protocol.DeadLetterTopic, Key: key, Value: value}
	if !byReference && size <= maxBytes {
		rec.Headers = append(headers[:len(headers):len(headers)], deadLetterHeaders(reason, source)...)
		return rec, false
	}
	rec.Key = domain.CutUTF8(key, maxReferenceKeyBytes)
	rec.Value = domain.CutUTF8(value, DeadLetterPrefixBytes)
	if headersSize(headers) <= maxReferenceHeaderBytes {
		rec.Headers = headers[:len(headers):len(headers)]
	}
	rec.Headers = append(rec.Headers, deadLetterHeaders(reason, source)...)
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderDeadLetterSize, Value: []byte(strconv.Itoa(len(value)))})
	return rec, true
}

func deadLetterHeaders(reason, source string) []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: HeaderDeadLetterReason, Value: []byte(domain.CutUTF8(reason, maxReferenceHeaderBytes))},
		{Key: HeaderDeadLetterSource, Value: []byte(source)},
	}
}

func headersSize(headers []kgo.RecordHeader) int {
	n := 0
	for _, h := range headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}
