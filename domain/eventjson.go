package domain

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sagaengine/saga/domain/internal/plainjson"
)

// The events every order writes (TaskSubmitted, StepDispatched,
// StepSucceeded, TaskProcessed) are encoded and decoded here without
// reflection, since encoding/json's reflection was a measurable part of the
// CPU each order costs. The fast paths are exact or absent: they produce the
// bytes json.Marshal produces and the values json.Unmarshal produces, and
// whenever an event holds anything they do not handle byte for byte (a string
// that json.Marshal would escape, a time outside RFC 3339's years, an unknown
// or differently cased member, an escaped string, a number that is not a
// plain integer), they give up and encoding/json does the work.
// FuzzEventJSONMatchesEncodingJSON holds them to that.

// appendEventJSON appends e's JSON to dst as json.Marshal would, or reports
// false if it has no fast path for e or for something e holds.
func appendEventJSON(dst []byte, e Event) ([]byte, bool) {
	if dst == nil {
		dst = make([]byte, 0, encodedSizeHint(e))
	}
	w := jsonWriter{b: dst, ok: true}
	switch e := e.(type) {
	case StepDispatched:
		w.str('{', "taskId", e.TaskID)
		w.str(',', "step", e.Step)
		w.str(',', "agent", e.Agent)
		if e.Instance != "" {
			w.str(',', "instance", e.Instance)
		}
		w.int(',', "attempt", int64(e.Attempt))
		w.time(',', "completeBy", e.CompleteBy)
		w.str(',', "lockedBy", e.LockedBy)
		w.str(',', "idempotencyKey", e.IdempotencyKey)
		w.time(',', "dispatchedAt", e.DispatchedAt)
	case StepSucceeded:
		w.str('{', "taskId", e.TaskID)
		w.str(',', "step", e.Step)
		w.int(',', "attempt", int64(e.Attempt))
		if len(e.Result) != 0 {
			w.raw(',', "result", e.Result)
		}
		w.time(',', "at", e.At)
		w.answer(e.Answer)
	case TaskSubmitted:
		w.str('{', "taskId", e.TaskID)
		w.str(',', "workflow", e.Workflow)
		if e.WorkflowVersion != 0 {
			w.int(',', "workflowVersion", int64(e.WorkflowVersion))
		}
		w.strs(',', "steps", e.Steps)
		if e.ReplyTo != "" {
			w.str(',', "replyTo", e.ReplyTo)
		}
		w.raw(',', "order", e.Order)
		w.time(',', "submittedAt", e.SubmittedAt)
		if e.TraceParent != "" {
			w.str(',', "traceparent", e.TraceParent)
		}
		if e.Priority != "" {
			w.str(',', "priority", string(e.Priority))
		}
	case TaskProcessed:
		w.str('{', "taskId", e.TaskID)
		w.time(',', "at", e.At)
	default:
		return dst, false
	}
	w.b = append(w.b, '}')
	return w.b, w.ok
}

// encodedSizeHint is about the length of e's JSON, a little over for the
// fast path's events, so that the one buffer an event is encoded into is
// not much larger than the event (stores may keep it).
func encodedSizeHint(e Event) int {
	switch e := e.(type) {
	case StepDispatched:
		return 224 + len(e.TaskID) + len(e.Step) + len(e.Agent) + len(e.Instance) + len(e.LockedBy) + len(e.IdempotencyKey)
	case StepSucceeded:
		return 128 + len(e.TaskID) + len(e.Step) + len(e.Result) + len(e.Instance)
	case TaskSubmitted:
		n := 224 + len(e.TaskID) + len(e.Workflow) + len(e.ReplyTo) + len(e.Order) + len(e.TraceParent) + len(e.Priority)
		for _, step := range e.Steps {
			n += len(step) + 3
		}
		return n
	case TaskProcessed:
		return 64 + len(e.TaskID)
	default:
		return 256
	}
}

// jsonWriter appends members of a JSON object; ok turns false, for good, at
// the first value it cannot write exactly as json.Marshal does.
type jsonWriter struct {
	b  []byte
	ok bool
}

func (w *jsonWriter) key(sep byte, name string) {
	w.b = append(w.b, sep, '"')
	w.b = append(w.b, name...)
	w.b = append(w.b, '"', ':')
}

func (w *jsonWriter) str(sep byte, name, s string) {
	w.key(sep, name)
	w.quoted(s)
}

// quoted appends s in quotes if json.Marshal would write it unescaped.
func (w *jsonWriter) quoted(s string) {
	if !plainJSONString(s) {
		w.ok = false
		return
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

func (w *jsonWriter) int(sep byte, name string, n int64) {
	w.key(sep, name)
	w.b = strconv.AppendInt(w.b, n, 10)
}

// time appends t as time.Time.MarshalJSON does, for the times it accepts.
func (w *jsonWriter) time(sep byte, name string, t time.Time) {
	w.key(sep, name)
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

// raw appends a json.RawMessage as json.Marshal does: null when nil,
// otherwise validated and compacted; HTML-escaping is left to encoding/json.
func (w *jsonWriter) raw(sep byte, name string, m json.RawMessage) {
	w.key(sep, name)
	if m == nil {
		w.b = append(w.b, "null"...)
		return
	}
	compact := true
	for _, c := range m {
		switch c {
		case '<', '>', '&', 0xE2: // 0xE2 starts U+2028 and U+2029
			w.ok = false
			return
		case ' ', '\t', '\n', '\r':
			compact = false
		}
	}
	if compact {
		if !json.Valid(m) {
			w.ok = false
			return
		}
		w.b = append(w.b, m...)
		return
	}
	buf := bytes.NewBuffer(w.b)
	if err := json.Compact(buf, m); err != nil {
		w.ok = false
		return
	}
	w.b = buf.Bytes()
}

func (w *jsonWriter) strs(sep byte, name string, ss []string) {
	w.key(sep, name)
	if ss == nil {
		w.b = append(w.b, "null"...)
		return
	}
	w.b = append(w.b, '[')
	for i, s := range ss {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.quoted(s)
	}
	w.b = append(w.b, ']')
}

func (w *jsonWriter) answer(a Answer) {
	if a.Instance != "" {
		w.str(',', "instance", a.Instance)
	}
	if a.Tries != 0 {
		w.int(',', "tries", int64(a.Tries))
	}
}

// plainJSONString reports whether json.Marshal writes s between quotes as
// it is: valid UTF-8 with no control character, quote, backslash, HTML
// character (<, >, &) or line or paragraph separator.
func plainJSONString(s string) bool {
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

// decodeEventJSON decodes the events appendEventJSON encodes, as
// json.Unmarshal would, or reports false to leave data to json.Unmarshal:
// for another event type, for anything but a valid JSON object of the
// event's own member names spelled exactly, and for any value it would not
// read exactly as json.Unmarshal does.
func decodeEventJSON(eventType string, data []byte) (Event, bool) {
	switch eventType {
	case StepDispatchedType, StepSucceededType, TaskSubmittedType, TaskProcessedType:
	default:
		return nil, false
	}
	r := plainjson.NewReader(data)
	switch eventType {
	case StepDispatchedType:
		var e StepDispatched
		for name, v := r.Begin(); r.Next(&name, &v); {
			switch string(name) {
			case "taskId":
				e.TaskID = r.Str(v)
			case "step":
				e.Step = r.Str(v)
			case "agent":
				e.Agent = r.Str(v)
			case "instance":
				e.Instance = r.Str(v)
			case "attempt":
				e.Attempt = r.Int(v)
			case "completeBy":
				e.CompleteBy = r.Time(v)
			case "lockedBy":
				e.LockedBy = r.Str(v)
			case "idempotencyKey":
				e.IdempotencyKey = r.Str(v)
			case "dispatchedAt":
				e.DispatchedAt = r.Time(v)
			default:
				r.Fail()
			}
		}
		return e, r.OK()
	case StepSucceededType:
		var e StepSucceeded
		for name, v := r.Begin(); r.Next(&name, &v); {
			switch string(name) {
			case "taskId":
				e.TaskID = r.Str(v)
			case "step":
				e.Step = r.Str(v)
			case "attempt":
				e.Attempt = r.Int(v)
			case "result":
				e.Result = r.Raw(v)
			case "at":
				e.At = r.Time(v)
			case "instance":
				e.Instance = r.Str(v)
			case "tries":
				e.Tries = r.Int(v)
			default:
				r.Fail()
			}
		}
		return e, r.OK()
	case TaskSubmittedType:
		var e TaskSubmitted
		for name, v := r.Begin(); r.Next(&name, &v); {
			switch string(name) {
			case "taskId":
				e.TaskID = r.Str(v)
			case "workflow":
				e.Workflow = r.Str(v)
			case "workflowVersion":
				e.WorkflowVersion = r.Int(v)
			case "steps":
				e.Steps = r.Strs(v)
			case "replyTo":
				e.ReplyTo = r.Str(v)
			case "order":
				e.Order = r.Raw(v)
			case "submittedAt":
				e.SubmittedAt = r.Time(v)
			case "traceparent":
				e.TraceParent = r.Str(v)
			case "priority":
				e.Priority = Priority(r.Str(v))
			default:
				r.Fail()
			}
		}
		return e, r.OK()
	default: // TaskProcessedType
		var e TaskProcessed
		for name, v := r.Begin(); r.Next(&name, &v); {
			switch string(name) {
			case "taskId":
				e.TaskID = r.Str(v)
			case "at":
				e.At = r.Time(v)
			default:
				r.Fail()
			}
		}
		return e, r.OK()
	}
}
