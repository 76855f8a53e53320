package processes

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// NewTraceParent starts a W3C trace: version 00, a random trace id and span
// id, sampled.
func NewTraceParent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
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
