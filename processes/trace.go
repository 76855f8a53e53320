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

// ChildTraceParent continues parent's trace with a new span id; an invalid
// or empty parent starts a new trace.
func ChildTraceParent(parent string) string {
	parts := strings.Split(parent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || len(parts[2]) != 16 {
		return NewTraceParent()
	}
	if _, err := hex.DecodeString(parts[1]); err != nil {
		return NewTraceParent()
	}
	var span [8]byte
	_, _ = rand.Read(span[:])
	return parts[0] + "-" + parts[1] + "-" + hex.EncodeToString(span[:]) + "-" + parts[3]
}
