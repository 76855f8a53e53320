package plainjson

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// Reader reads a JSON object member by member, checking the grammar on the
// way for what it reads (raw values are checked with json.Valid). Its ok
// turns false, for good, at the first thing that is not valid JSON or that
// it would not read exactly as json.Unmarshal does; the caller then leaves
// the whole text to encoding/json. It never reads past the end of data.
//
// Duplicate members are read in turn, the last one winning, as
// json.Unmarshal does for strings, numbers, times and raw values; a caller
// decoding a map or a pointer (which json.Unmarshal merges into) must
// refuse a second one.
type Reader struct {
	data  []byte
	i     int
	ok    bool
	begun bool
}

// NewReader reads data.
func NewReader(data []byte) Reader {
	return Reader{data: data, ok: true}
}

// OK reports whether everything read so far was read exactly.
func (r *Reader) OK() bool { return r.ok }

// Fail gives up: OK reports false from now on.
func (r *Reader) Fail() { r.ok = false }

func (r *Reader) space() {
	for r.i < len(r.data) {
		switch r.data[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// expect moves past c, or fails.
func (r *Reader) expect(c byte) {
	if r.i >= len(r.data) || r.data[r.i] != c {
		r.ok = false
		return
	}
	r.i++
}

// Begin starts reading the members of an object, for the loop
//
//	for name, v := r.Begin(); r.Next(&name, &v); { ... }
func (r *Reader) Begin() (name, value []byte) {
	r.space()
	r.expect('{')
	return nil, nil
}

// Next reads the next member's name and raw value. It reports false at the
// object's end, which must end the text too, and once ok is false. Names
// that need unescaping are left to encoding/json.
func (r *Reader) Next(name, value *[]byte) bool {
	if !r.ok {
		return false
	}
	r.space()
	if r.i >= len(r.data) {
		r.ok = false
		return false
	}
	if r.data[r.i] == '}' {
		r.i++
		r.space()
		r.ok = r.i == len(r.data)
		return false
	}
	if r.begun {
		r.expect(',')
		r.space()
	}
	r.begun = true
	n := r.value()
	if len(n) < 2 || n[0] != '"' || !PlainText(n[1:len(n)-1]) {
		r.ok = false
		return false
	}
	r.space()
	r.expect(':')
	r.space()
	*name = n[1 : len(n)-1]
	*value = r.value()
	return r.ok
}

// value returns the extent of the value starting at r.i and moves past it;
// what is inside is checked by whoever reads it.
func (r *Reader) value() []byte {
	start := r.i
	if r.i >= len(r.data) {
		r.ok = false
		return nil
	}
	switch r.data[r.i] {
	case '"':
		r.skipString()
	case '{', '[':
		depth := 0
		for r.ok {
			if r.i >= len(r.data) {
				r.ok = false
				break
			}
			switch r.data[r.i] {
			case '"':
				r.skipString()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			r.i++
			if depth == 0 {
				break
			}
		}
	default: // a number, true, false or null
		for r.i < len(r.data) {
			switch r.data[r.i] {
			case ',', '}', ']', ':', ' ', '\t', '\n', '\r':
				return r.data[start:r.i]
			}
			r.i++
		}
	}
	return r.data[start:r.i]
}

// skipString moves past the string starting at r.i.
func (r *Reader) skipString() {
	for r.i++; r.i < len(r.data); r.i++ {
		switch r.data[r.i] {
		case '\\':
			r.i++
		case '"':
			r.i++
			return
		}
	}
	r.ok = false
}

// Str reads a string that needs no unescaping.
func (r *Reader) Str(v []byte) string {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || !PlainText(v[1:len(v)-1]) {
		r.ok = false
		return ""
	}
	return string(v[1 : len(v)-1])
}

// PlainText reports whether b is the inside of a JSON string that
// json.Unmarshal reads as it is: valid UTF-8 with no escape, quote or
// control character.
func PlainText(b []byte) bool {
	ascii := true
	for _, c := range b {
		switch {
		case c < 0x20, c == '"', c == '\\':
			return false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return ascii || utf8.Valid(b)
}

// digits reports whether v is an integer written as JSON writes one:
// optionally signed when signed, without leading zeros.
func digits(v []byte, signed bool) bool {
	if signed && len(v) > 0 && v[0] == '-' {
		v = v[1:]
	}
	if len(v) == 0 || (v[0] == '0' && len(v) > 1) {
		return false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Int reads an integer, written as JSON writes one, that fits an int.
func (r *Reader) Int(v []byte) int {
	if !digits(v, true) {
		r.ok = false
		return 0
	}
	if n, ok := small(v); ok {
		return int(n)
	}
	n, err := strconv.ParseInt(string(v), 10, strconv.IntSize)
	if err != nil {
		r.ok = false
	}
	return int(n)
}

// Uint64 reads a non-negative integer, written as JSON writes one, that
// fits a uint64.
func (r *Reader) Uint64(v []byte) uint64 {
	if !digits(v, false) {
		r.ok = false
		return 0
	}
	if n, ok := small(v); ok {
		return uint64(n)
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		r.ok = false
	}
	return n
}

// small is the value of an integer of digits of at most 18 digits, which
// fits any integer type of 64 bits, without the allocation of strconv's.
func small(v []byte) (int64, bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// Time reads a time written as time.Time.MarshalJSON writes it, and only
// such a time: it must format back to the same text.
func (r *Reader) Time(v []byte) time.Time {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		r.ok = false
		return time.Time{}
	}
	text := v[1 : len(v)-1]
	t, ok := parseUTC(text)
	if !ok {
		s := r.Str(v)
		if !r.ok {
			return time.Time{}
		}
		var err error
		t, err = time.Parse(time.RFC3339Nano, s)
		if _, offset := t.Zone(); err != nil || t.Year() < 0 || t.Year() > 9999 || offset <= -24*60*60 || offset >= 24*60*60 {
			r.ok = false
			return time.Time{}
		}
	}
	var buf [64]byte
	if string(t.AppendFormat(buf[:0], time.RFC3339Nano)) != string(text) {
		r.ok = false
	}
	return t
}

// parseUTC reads a time in UTC as time.RFC3339Nano writes it, the shape of
// the times saga writes, without the allocation of time.Parse; Time checks
// that the result formats back to the same text, which rules out fields
// out of range. It reports false for any other shape.
func parseUTC(s []byte) (time.Time, bool) {
	if len(s) < 20 || len(s) > 30 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' || s[len(s)-1] != 'Z' {
		return time.Time{}, false
	}
	num := func(b []byte) (int, bool) {
		n := 0
		for _, c := range b {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	year, ok1 := num(s[0:4])
	month, ok2 := num(s[5:7])
	day, ok3 := num(s[8:10])
	hour, ok4 := num(s[11:13])
	minute, ok5 := num(s[14:16])
	sec, ok6 := num(s[17:19])
	nsec, ok7 := 0, true
	if frac := s[19 : len(s)-1]; len(frac) > 0 {
		if len(frac) < 2 || frac[0] != '.' {
			return time.Time{}, false
		}
		nsec, ok7 = num(frac[1:])
		for range 10 - len(frac) {
			nsec *= 10
		}
	}
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC), true
}

// Raw copies a valid JSON value for a json.RawMessage.
func (r *Reader) Raw(v []byte) json.RawMessage {
	if !Valid(v) {
		r.ok = false
		return nil
	}
	return append(json.RawMessage(nil), v...)
}

// Strs reads an array of strings, or null.
func (r *Reader) Strs(v []byte) []string {
	if string(v) == "null" {
		return nil
	}
	sub := NewReader(v)
	sub.expect('[')
	out := []string{}
	for sub.ok {
		sub.space()
		if sub.i < len(v) && v[sub.i] == ']' {
			sub.i++
			sub.ok = sub.i == len(v)
			break
		}
		if len(out) > 0 {
			sub.expect(',')
			sub.space()
		}
		out = append(out, sub.Str(sub.value()))
	}
	r.ok = r.ok && sub.ok
	return out
}

// RawMap reads an object of raw values by plain names, or null, for a
// map[string]json.RawMessage that held nothing before.
func (r *Reader) RawMap(v []byte) map[string]json.RawMessage {
	if string(v) == "null" {
		return nil
	}
	sub := NewReader(v)
	out := map[string]json.RawMessage{}
	for name, value := sub.Begin(); sub.Next(&name, &value); {
		out[string(name)] = sub.Raw(value)
	}
	r.ok = r.ok && sub.ok
	return out
}
