package plainjson

import (
	"time"
	"unicode/utf8"
)

// hex are the digits encoding/json writes in \u escapes.
const hex = "0123456789abcdef"

// EscapedStr appends a member of string value s, escaped as json.Marshal
// escapes it (Quoted refuses such strings instead).
func (w *Writer) EscapedStr(sep byte, name, s string) {
	w.Key(sep, name)
	w.Escaped(s)
}

// Escaped appends s in quotes as json.Marshal writes a string: quotes and
// backslashes escaped, control characters as \b, \f, \n, \r, \t or \u00XX,
// the HTML characters <, > and & as \u003c, \u003e and \u0026, the line
// and paragraph separators as \u2028 and \u2029, and each byte of invalid
// UTF-8 as \ufffd.
func (w *Writer) Escaped(s string) {
	if PlainString(s) {
		w.b = append(w.b, '"')
		w.b = append(w.b, s...)
		w.b = append(w.b, '"')
		return
	}
	w.b = appendEscaped(w.b, s)
}

// appendEscaped is encoding/json's appendString with HTML escaping, which
// json.Marshal applies.
func appendEscaped(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default: // other control characters, <, > and &
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendCompact appends the valid JSON value m as json.Marshal writes a
// json.RawMessage: without the whitespace between tokens, and with <, >, &
// and the line and paragraph separators in its strings escaped as \u003c,
// \u003e, \u0026, \u2028 and \u2029.
func appendCompact(dst, m []byte) []byte {
	start := 0
	inString, escaped := false, false
	for i := 0; i < len(m); i++ {
		c := m[i]
		switch {
		case escaped:
			escaped = false
		case inString:
			switch {
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			case c == '<' || c == '>' || c == '&':
				dst = append(dst, m[start:i]...)
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
				start = i + 1
			case c == 0xE2 && i+2 < len(m) && m[i+1] == 0x80 && m[i+2]&^1 == 0xA8:
				dst = append(dst, m[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hex[m[i+2]&0xF])
				i += 2
				start = i + 1
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			dst = append(dst, m[start:i]...)
			start = i + 1
		}
	}
	return append(dst, m[start:]...)
}

// OmitEmptyStr appends the member name of value s after a comma, escaped as
// EscapedStr does, unless s is empty: a string field tagged omitempty.
func (w *Writer) OmitEmptyStr(name, s string) {
	if s != "" {
		w.EscapedStr(',', name, s)
	}
}

// OmitEmptyInt appends the member name of value n after a comma unless n is
// zero: an integer field tagged omitempty.
func (w *Writer) OmitEmptyInt(name string, n int64) {
	if n != 0 {
		w.Int(',', name, n)
	}
}

// OmitEmptyTime appends the member name of value *t after a comma unless t
// is nil: a time pointer field tagged omitempty.
func (w *Writer) OmitEmptyTime(name string, t *time.Time) {
	if t != nil {
		w.Time(',', name, *t)
	}
}
