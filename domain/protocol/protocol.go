// Package protocol is saga's wire format, for the engine and for its
// callers and agents: the Kafka topic names, the CloudEvents types and
// binary-mode headers every saga message carries, W3C trace context, and
// the JSON messages themselves: orders in saga's own shape (ParseOrder),
// agent commands (ExecuteStep) and replies (StepReply), task statuses
// (TaskStatus, StatusOf) and alerts. docs/protocol.md describes all of it
// for other languages; every JSON shape and name here is part of that
// contract and only grows.
//
// protocol builds on package domain (task states, failure kinds, HTTP
// calls, task events) and on nothing else of the engine, so the public Go
// client links only these two; domain never imports protocol: decisions
// take domain values, and this package converts (StepReply.Reply,
// ExecuteStep.TemplateData).
package protocol

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"time"
)

// CloudEvents Kafka binding (binary mode) header names, and saga's own.
const (
	HeaderSpecVersion = "ce_specversion"
	HeaderID          = "ce_id"
	HeaderSource      = "ce_source"
	HeaderType        = "ce_type"
	HeaderTime        = "ce_time"
	HeaderSubject     = "ce_subject"
	HeaderContentType = "content-type"
	HeaderTraceParent = "traceparent"
	// HeaderDeadLetterReason says why a record was dead-lettered.
	HeaderDeadLetterReason = "saga_deadletter_reason"
	// HeaderDeadLetterSource is topic/partition/offset of the original record.
	HeaderDeadLetterSource = "saga_deadletter_source"
	// HeaderDeadLetterSize, on a dead letter by reference, is the size in
	// bytes of the original record's value, of which the dead letter keeps
	// only the start: the whole is at HeaderDeadLetterSource, while its
	// topic keeps it.
	HeaderDeadLetterSize = "saga_deadletter_size"
	// HeaderRedrivenFrom is on a record an operator re-published from the
	// dead letters (sagactl deadletters redrive): the dead letter's
	// saga.deadletter/partition/offset. A redriven record that is
	// dead-lettered again keeps it.
	HeaderRedrivenFrom = "saga_redriven_from"
)

// Header is one record header.
type Header struct {
	Key, Value string
}

// Headers are the headers of a saga message: CloudEvents binary mode with a
// JSON body of type ceType from source about subject (the task id), and
// traceparent as the trace context, as it is: the sender names the span
// that sends the message, so that the receiver's spans are its children.
// An invalid or empty traceparent starts a new trace.
func Headers(ceType, source, subject, traceparent string, now time.Time) []Header {
	values, ends := AppendHeaderValues(nil, ceType, source, subject, traceparent, now)
	all := string(values)
	hs := make([]Header, len(HeaderKeys))
	start := 0
	for i, end := range ends {
		hs[i] = Header{HeaderKeys[i], all[start:end]}
		start = end
	}
	return hs
}

// HeaderKeys are the keys of the headers of a saga message, in the order
// in which Headers returns them and AppendHeaderValues writes their values.
var HeaderKeys = [8]string{HeaderTraceParent, HeaderSpecVersion, HeaderID, HeaderSource, HeaderType, HeaderTime, HeaderSubject, HeaderContentType}

// AppendHeaderValues appends the values of the headers Headers returns to
// dst, one after the other in the order of HeaderKeys, and returns where
// each ends in dst. A producer can so keep every value in one buffer.
func AppendHeaderValues(dst []byte, ceType, source, subject, traceparent string, now time.Time) ([]byte, [len(HeaderKeys)]int) {
	var ends [len(HeaderKeys)]int
	dst = slices.Grow(dst, HeaderValuesSize(ceType, source, subject))
	if ValidTraceParent(traceparent) {
		dst = append(dst, traceparent...)
	} else {
		dst = appendNewTraceParent(dst)
	}
	ends[0] = len(dst)
	dst = append(dst, "1.0"...)
	ends[1] = len(dst)
	dst = appendNewID(dst)
	ends[2] = len(dst)
	dst = append(dst, source...)
	ends[3] = len(dst)
	dst = append(dst, ceType...)
	ends[4] = len(dst)
	dst = now.UTC().AppendFormat(dst, time.RFC3339Nano)
	ends[5] = len(dst)
	dst = append(dst, subject...)
	ends[6] = len(dst)
	dst = append(dst, "application/json"...)
	ends[7] = len(dst)
	return dst, ends
}

// HeaderValuesSize bounds the bytes AppendHeaderValues appends.
func HeaderValuesSize(ceType, source, subject string) int {
	return headerValuesSize + len(ceType) + len(source) + len(subject)
}

// headerValuesSize bounds the header values that do not come from the
// caller: a traceparent, "1.0", a UUID, a time in RFC 3339 with
// nanoseconds, "application/json".
const headerValuesSize = 55 + 3 + 36 + len("2006-01-02T15:04:05.999999999Z") + len("application/json")

// appendNewID appends a random UUID (version 4) for ce_id.
func appendNewID(dst []byte) []byte {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[c>>4], hexDigits[c&0x0f])
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// appendNewTraceParent appends NewTraceParent's header.
func appendNewTraceParent(dst []byte) []byte {
	var b [24]byte
	_, _ = rand.Read(b[:])
	dst = append(dst, "00-"...)
	dst = hex.AppendEncode(dst, b[:16])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, b[16:])
	return append(dst, "-01"...)
}

// NewTraceParent starts a W3C trace: version 00, a random trace id and span
// id, sampled.
func NewTraceParent() string {
	return string(appendNewTraceParent(make([]byte, 0, 55)))
}

// ValidTraceParent reports whether s is a W3C traceparent header of
// version 00: 00-<32 lowercase hex, not all zero>-<16 lowercase hex, not all
// zero>-<2 lowercase hex>, 55 bytes. Anything else (a longer header
// included) is not trusted: saga starts a new trace instead of storing it.
func ValidTraceParent(s string) bool {
	if len(s) != 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' || s[:2] != "00" {
		return false
	}
	trace, span, flags := s[3:35], s[36:52], s[53:]
	return lowerHex(trace) && lowerHex(span) && lowerHex(flags) &&
		trace != strings.Repeat("0", 32) && span != strings.Repeat("0", 16)
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ChildTraceParent continues parent's trace with a new span id; an invalid
// or empty parent starts a new trace.
func ChildTraceParent(parent string) string {
	if !ValidTraceParent(parent) {
		return NewTraceParent()
	}
	var span [8]byte
	_, _ = rand.Read(span[:])
	return parent[:36] + hex.EncodeToString(span[:]) + parent[52:]
}
