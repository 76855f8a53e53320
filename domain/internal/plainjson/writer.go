package plainjson

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Writer appends the members of a JSON object as json.Marshal writes them.
// Its ok turns false, for good, at the first value it cannot write exactly
// as json.Marshal does; the caller then leaves the whole value to
// json.Marshal.
type Writer struct {
	b  []byte
	ok bool
}

// NewWriter appends to dst.
func NewWriter(dst []byte) Writer {
	return Writer{b: dst, ok: true}
}

// OK reports whether everything written so far was written exactly.
func (w *Writer) OK() bool { return w.ok }

// Bytes is what was written, after what dst held.
func (w *Writer) Bytes() []byte { return w.b }

// Byte appends c, such as the object's opening or closing brace.
func (w *Writer) Byte(c byte) { w.b = append(w.b, c) }

// Verbatim appends raw as it is: JSON the caller made exact.
func (w *Writer) Verbatim(raw []byte) { w.b = append(w.b, raw...) }

// Key appends sep (the opening brace or a comma) and a member's name,
// which must be plain (PlainString), and the colon.
func (w *Writer) Key(sep byte, name string) {
	w.b = append(w.b, sep, '"')
	w.b = append(w.b, name...)
	w.b = append(w.b, '"', ':')
}

// Str appends a member of string value s.
func (w *Writer) Str(sep byte, name, s string) {
	w.Key(sep, name)
	w.Quoted(s)
}

// Quoted appends s in quotes if json.Marshal would write it unescaped.
func (w *Writer) Quoted(s string) {
	if !PlainString(s) {
		w.ok = false
		return
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

// Int appends a member of integer value n.
func (w *Writer) Int(sep byte, name string, n int64) {
	w.Key(sep, name)
	w.b = strconv.AppendInt(w.b, n, 10)
}

// Uint appends a member of unsigned integer value n.
func (w *Writer) Uint(sep byte, name string, n uint64) {
	w.Key(sep, name)
	w.b = strconv.AppendUint(w.b, n, 10)
}

// Time appends a member of value t as time.Time.MarshalJSON writes it, for
// the times it writes in the shape Reader.Time reads.
func (w *Writer) Time(sep byte, name string, t time.Time) {
	w.Key(sep, name)
	if y := t.Year(); y < 0 || y > 9999 {
		w.ok = false
		return
	}
	if _, offset := t.Zone(); offset <= -24*60*60 || offset >= 24*60*60 || offset%60 != 0 {
		w.ok = false
		return
	}
	w.b = append(w.b, '"')
	w.b = t.AppendFormat(w.b, time.RFC3339Nano)
	w.b = append(w.b, '"')
}

// Raw appends a member of value m.
func (w *Writer) Raw(sep byte, name string, m json.RawMessage) {
	w.Key(sep, name)
	w.RawValue(m)
}

// RawValue appends a json.RawMessage as json.Marshal does: null when nil,
// otherwise validated and compacted, with <, >, & and the line and
// paragraph separators in its strings escaped.
func (w *Writer) RawValue(m json.RawMessage) {
	if m == nil {
		w.b = append(w.b, "null"...)
		return
	}
	if !Valid(m) {
		w.ok = false
		return
	}
	for _, c := range m {
		switch c {
		case '<', '>', '&', 0xE2, ' ', '\t', '\n', '\r': // 0xE2 starts U+2028 and U+2029
			w.b = appendCompact(w.b, m)
			return
		}
	}
	w.b = append(w.b, m...)
}

// Strs appends a member of an array of strings (null when nil).
func (w *Writer) Strs(sep byte, name string, ss []string) {
	w.Key(sep, name)
	if ss == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = append(w.b, '[')
	for i, s := range ss {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.Quoted(s)
	}
	w.b = append(w.b, ']')
}

// PlainString reports whether json.Marshal writes s between quotes as it
// is: valid UTF-8 with no control character, quote, backslash, HTML
// character (<, >, &) or line or paragraph separator.
func PlainString(s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return ascii || (utf8.ValidString(s) && !strings.ContainsRune(s, '\u2028') && !strings.ContainsRune(s, '\u2029'))
}
