package eventstore

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/sagaengine/saga/domain"
)

// decodeMetadata decodes an event's metadata into m as json.Unmarshal does,
// ignoring its error as readers of foreign events must (m keeps what was
// decoded before the error). The shape saga writes, one flat object of known
// keys with plain string values, is read without reflection; anything else
// (escapes, other keys, spaces, other types) goes to json.Unmarshal.
func decodeMetadata(b []byte, m *domain.EventMetadata) {
	fast := *m
	if decodeMetadataFast(b, &fast) {
		*m = fast
		return
	}
	_ = json.Unmarshal(b, m)
}

// decodeMetadataFast decodes b when it is exactly {"key":"value",...} with
// keys of domain.EventMetadata as its JSON tags spell them and values without
// escapes or control characters, and reports whether it did; it may have
// changed m when it did not.
func decodeMetadataFast(b []byte, m *domain.EventMetadata) bool {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return false
	}
	b = b[1 : len(b)-1]
	for len(b) > 0 {
		key, rest, ok := plainString(b)
		if !ok || len(rest) == 0 || rest[0] != ':' {
			return false
		}
		value, rest, ok := plainString(rest[1:])
		if !ok {
			return false
		}
		switch string(key) {
		case "correlationId":
			m.CorrelationID = string(value)
		case "causationId":
			m.CausationID = string(value)
		case "actor":
			m.Actor = string(value)
		case "traceparent":
			m.TraceParent = string(value)
		default:
			return false
		}
		if len(rest) == 0 {
			return true
		}
		if rest[0] != ',' || len(rest) == 1 {
			return false
		}
		b = rest[1:]
	}
	return true
}

// plainString reads a JSON string without escapes or control characters,
// in valid UTF-8, at the start of b.
func plainString(b []byte) (s, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, false
	}
	ascii := true
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			s = b[1:i]
			if !ascii && !utf8.Valid(s) {
				return nil, nil, false
			}
			return s, b[i+1:], true
		case c == '\\' || c < 0x20:
			return nil, nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, nil, false
}
