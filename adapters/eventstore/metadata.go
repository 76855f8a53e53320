package eventstore

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/cockroachdb/errors"

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

// metadataJSONSize returns the length of m's JSON as json.Marshal writes it,
// or false when a field holds a byte it would escape or a non-ASCII one, for
// which encodeMetadata leaves the work to json.Marshal.
func metadataJSONSize(m *domain.EventMetadata) (int, bool) {
	n := len(`{"correlationId":"","actor":""}`) + len(m.CorrelationID) + len(m.Actor)
	if m.CausationID != "" {
		n += len(`,"causationId":""`) + len(m.CausationID)
	}
	if m.TraceParent != "" {
		n += len(`,"traceparent":""`) + len(m.TraceParent)
	}
	ok := unescaped(m.CorrelationID) && unescaped(m.CausationID) && unescaped(m.Actor) && unescaped(m.TraceParent)
	return n, ok
}

// appendMetadataJSON appends m's JSON to b as json.Marshal writes it, for m
// whose metadataJSONSize is ok: the fields in declaration order, the
// omitempty ones left out when empty.
func appendMetadataJSON(b []byte, m *domain.EventMetadata) []byte {
	b = append(b, `{"correlationId":"`...)
	b = append(b, m.CorrelationID...)
	if m.CausationID != "" {
		b = append(b, `","causationId":"`...)
		b = append(b, m.CausationID...)
	}
	b = append(b, `","actor":"`...)
	b = append(b, m.Actor...)
	if m.TraceParent != "" {
		b = append(b, `","traceparent":"`...)
		b = append(b, m.TraceParent...)
	}
	return append(b, `"}`...)
}

// unescaped reports whether json.Marshal writes s as it is between quotes:
// printable ASCII without '"', '\\' or the HTML characters it escapes.
func unescaped(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= utf8.RuneSelf, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// encodeMetadata sets each out[i].Metadata to the JSON of events[i]'s
// metadata, as json.Marshal writes it, in one allocation for all of them
// when every field is plain (the metadata saga writes); each slice has its
// own capacity, so appending to one never touches the next.
func encodeMetadata(events []domain.NewEvent, out []LocalEvent) error {
	total := 0
	for i := range events {
		n, ok := metadataJSONSize(&events[i].Metadata)
		if !ok {
			total = -1
			break
		}
		total += n
	}
	if total < 0 {
		for i := range events {
			b, err := json.Marshal(events[i].Metadata)
			if err != nil {
				return errors.Wrap(err, "encode event metadata")
			}
			out[i].Metadata = b
		}
		return nil
	}
	buf := make([]byte, 0, total)
	for i := range events {
		start := len(buf)
		buf = appendMetadataJSON(buf, &events[i].Metadata)
		out[i].Metadata = buf[start:len(buf):len(buf)]
	}
	return nil
}
