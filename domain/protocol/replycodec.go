package protocol

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/internal/plainjson"
)

// AppendStepReply appends the JSON encoding of r to dst: the same bytes
// json.Marshal gives (the reply is a wire contract), without reflection or
// allocation for the replies agents send. A field json.Marshal would escape
// or an invalid result goes through json.Marshal itself.
func AppendStepReply(dst []byte, r StepReply) ([]byte, error) {
	start := len(dst)
	dst = append(dst, `{"taskId":`...)
	dst = appendJSONString(dst, r.TaskID)
	dst = append(dst, `,"step":`...)
	dst = appendJSONString(dst, r.Step)
	dst = append(dst, `,"action":`...)
	dst = appendJSONString(dst, r.Action)
	dst = append(dst, `,"attempt":`...)
	dst = strconv.AppendInt(dst, int64(r.Attempt), 10)
	dst = append(dst, `,"outcome":`...)
	dst = appendJSONString(dst, r.Outcome)
	if r.Failure != "" {
		dst = append(dst, `,"failure":`...)
		dst = appendJSONString(dst, string(r.Failure))
	}
	if r.Reason != "" {
		dst = append(dst, `,"reason":`...)
		dst = appendJSONString(dst, r.Reason)
	}
	if r.Agent != "" {
		dst = append(dst, `,"agent":`...)
		dst = appendJSONString(dst, r.Agent)
	}
	if len(r.Result) > 0 {
		if !plainJSON(r.Result) {
			body, err := json.Marshal(r)
			return append(dst[:start], body...), err
		}
		dst = append(dst, `,"result":`...)
		dst = append(dst, r.Result...)
	}
	if r.Instance != "" {
		dst = append(dst, `,"instance":`...)
		dst = appendJSONString(dst, r.Instance)
	}
	if r.Tries != 0 {
		dst = append(dst, `,"tries":`...)
		dst = strconv.AppendInt(dst, int64(r.Tries), 10)
	}
	if r.Target != "" {
		dst = append(dst, `,"target":`...)
		dst = appendJSONString(dst, r.Target)
	}
	return append(dst, '}'), nil
}

// appendJSONString appends s quoted as json.Marshal quotes it: as it is
// when it holds only printable ASCII that needs no escape, else through
// json.Marshal.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plainByte(s[i]) {
			quoted, _ := json.Marshal(s) // a string always encodes
			return append(dst, quoted...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// plainByte reports whether json.Marshal writes b, inside a string, as it
// is: printable ASCII other than the quote, the backslash and the three
// characters it escapes for HTML.
func plainByte(b byte) bool {
	return b >= 0x20 && b < 0x7f && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
}

// plainJSON reports whether raw is valid JSON that json.Marshal would copy
// unchanged into an encoding: already compact, and with no byte it
// escapes for HTML and nothing but ASCII.
func plainJSON(raw []byte) bool {
	inString := false
	for i := 0; i < len(raw); i++ {
		b := raw[i]
		switch {
		case b >= 0x7f || b < 0x20 || b == '<' || b == '>' || b == '&':
			return false
		case inString && b == '\\':
			i++ // the escaped byte cannot end the string
		case b == '"':
			inString = !inString
		case !inString && (b == ' '):
			return false
		}
	}
	return json.Valid(raw)
}

// parseStepReplyPlain decodes a reply in the shape AppendStepReply writes
// for plain fields (keys exact and each at most once, strings of printable
// ASCII without escapes, no whitespace outside the result, no null): the
// same StepReply json.Unmarshal gives for it, without reflection. It
// reports false for anything else, which the caller then decodes with
// json.Unmarshal, so that every other input, valid or not, is read (or
// refused) exactly as before.
func parseStepReplyPlain(body []byte) (StepReply, bool) {
	var r StepReply
	var seen uint16
	if len(body) < 2 || body[0] != '{' || body[len(body)-1] != '}' {
		return r, false
	}
	p := body[1 : len(body)-1]
	for len(p) > 0 {
		key, rest, ok := plainBytes(p)
		if !ok || len(rest) == 0 || rest[0] != ':' {
			return r, false
		}
		p = rest[1:]
		var bit uint16
		switch string(key) { // no allocation: the compiler compares the bytes
		case "taskId":
			bit = 1 << 0
			r.TaskID, p, ok = plainString(p)
		case "step":
			bit = 1 << 1
			r.Step, p, ok = plainString(p)
		case "action":
			bit = 1 << 2
			r.Action, p, ok = plainString(p)
		case "attempt":
			bit = 1 << 3
			r.Attempt, p, ok = plainInt(p)
		case "outcome":
			bit = 1 << 4
			r.Outcome, p, ok = plainString(p)
		case "failure":
			bit = 1 << 5
			var s string
			s, p, ok = plainString(p)
			r.Failure = domain.FailureKind(s)
		case "reason":
			bit = 1 << 6
			r.Reason, p, ok = plainString(p)
		case "agent":
			bit = 1 << 7
			r.Agent, p, ok = plainString(p)
		case "result":
			bit = 1 << 8
			r.Result, p, ok = plainValue(p)
		case "instance":
			bit = 1 << 9
			r.Instance, p, ok = plainString(p)
		case "tries":
			bit = 1 << 10
			r.Tries, p, ok = plainInt(p)
		case "target":
			bit = 1 << 11
			r.Target, p, ok = plainString(p)
		default:
			return r, false
		}
		if !ok || seen&bit != 0 {
			return r, false
		}
		seen |= bit
		if len(p) > 0 {
			if p[0] != ',' || len(p) == 1 {
				return r, false
			}
			p = p[1:]
		}
	}
	return r, true
}

// plainBytes reads a string of plain bytes (plainByte, and the HTML
// characters, which need no escape in input) at the start of p.
func plainBytes(p []byte) ([]byte, []byte, bool) {
	if len(p) < 2 || p[0] != '"' {
		return nil, p, false
	}
	for i := 1; i < len(p); i++ {
		switch b := p[i]; {
		case b == '"':
			return p[1:i], p[i+1:], true
		case b < 0x20 || b >= 0x7f || b == '\\':
			return nil, p, false
		}
	}
	return nil, p, false
}

// plainString is plainBytes as a string.
func plainString(p []byte) (string, []byte, bool) {
	s, rest, ok := plainBytes(p)
	return string(s), rest, ok
}

// plainInt reads an integer at the start of p, in JSON's syntax, that
// fits an int.
func plainInt(p []byte) (int, []byte, bool) {
	end := 0
	if end < len(p) && p[end] == '-' {
		end++
	}
	digits := end
	for end < len(p) && p[end] >= '0' && p[end] <= '9' {
		end++
	}
	if end == digits || (p[digits] == '0' && end > digits+1) {
		return 0, p, false
	}
	if end-digits > 18 {
		return 0, p, false // may not fit: json.Unmarshal decides
	}
	n := 0
	for _, d := range p[digits:end] {
		n = n*10 + int(d-'0')
	}
	if digits > 0 {
		n = -n
	}
	return n, p[end:], true
}

// plainValue reads an object, array or string (a result) at the start of
// p and checks it is valid JSON; it returns a copy, as json.Unmarshal
// does.
func plainValue(p []byte) ([]byte, []byte, bool) {
	if len(p) == 0 || (p[0] != '{' && p[0] != '[' && p[0] != '"') {
		return nil, p, false
	}
	depth, inString := 0, false
	for i := 0; i < len(p); i++ {
		b := p[i]
		if inString {
			switch b {
			case '\\':
				i++
			case '"':
				inString = false
				if depth == 0 {
					return validCopy(p[:i+1], p[i+1:])
				}
			}
			continue
		}
		switch b {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return validCopy(p[:i+1], p[i+1:])
			}
		}
	}
	return nil, p, false
}

func validCopy(value, rest []byte) ([]byte, []byte, bool) {
	if !json.Valid(value) {
		return nil, rest, false
	}
	return bytes.Clone(value), rest, true
}

// AppendExecuteStep appends the JSON encoding of c to dst: the same bytes
// json.Marshal gives (the command is a wire contract), with reflection
// only for the HTTP call. A field json.Marshal would escape, a result it
// would compact or a time it refuses goes through json.Marshal itself.
func AppendExecuteStep(dst []byte, c ExecuteStep) ([]byte, error) {
	start := len(dst)
	slow := func() ([]byte, error) {
		body, err := json.Marshal(c)
		return append(dst[:start], body...), err
	}
	dst = append(dst, `{"taskId":`...)
	dst = appendJSONString(dst, c.TaskID)
	dst = append(dst, `,"workflow":`...)
	dst = appendJSONString(dst, c.Workflow)
	dst = append(dst, `,"step":`...)
	dst = appendJSONString(dst, c.Step)
	dst = append(dst, `,"agent":`...)
	dst = appendJSONString(dst, c.Agent)
	dst = append(dst, `,"action":`...)
	dst = appendJSONString(dst, c.Action)
	if c.Compensation != "" {
		dst = append(dst, `,"compensation":`...)
		dst = appendJSONString(dst, c.Compensation)
	}
	dst = append(dst, `,"attempt":`...)
	dst = strconv.AppendInt(dst, int64(c.Attempt), 10)
	_, offset := c.CompleteBy.Zone()
	if y := c.CompleteBy.Year(); y < 0 || y > 9999 || offset <= -24*3600 || offset >= 24*3600 {
		return slow() // json.Marshal refuses it
	}
	dst = append(dst, `,"completeBy":"`...)
	dst = c.CompleteBy.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","idempotencyKey":`...)
	dst = appendJSONString(dst, c.IdempotencyKey)
	if c.WorkflowVersion != 0 {
		dst = append(dst, `,"workflowVersion":`...)
		dst = strconv.AppendInt(dst, int64(c.WorkflowVersion), 10)
	}
	if len(c.Order) > 0 {
		if !plainJSON(c.Order) {
			return slow()
		}
		dst = append(dst, `,"order":`...)
		dst = append(dst, c.Order...)
	}
	if len(c.Results) > 0 {
		steps := make([]string, 0, len(c.Results))
		for step := range c.Results {
			steps = append(steps, step)
		}
		slices.Sort(steps)
		dst = append(dst, `,"results":{`...)
		for i, step := range steps {
			raw := c.Results[step]
			if len(raw) == 0 || !plainJSON(raw) {
				return slow()
			}
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, step)
			dst = append(dst, ':')
			dst = append(dst, raw...)
		}
		dst = append(dst, '}')
	}
	if len(c.Result) > 0 {
		if !plainJSON(c.Result) {
			return slow()
		}
		dst = append(dst, `,"result":`...)
		dst = append(dst, c.Result...)
	}
	if c.HTTP != nil {
		call, err := json.Marshal(c.HTTP)
		if err != nil {
			return slow()
		}
		dst = append(dst, `,"http":`...)
		dst = append(dst, call...)
	}
	if c.Priority != "" {
		dst = append(dst, `,"priority":`...)
		dst = appendJSONString(dst, string(c.Priority))
	}
	return append(dst, '}'), nil
}

// parseExecuteStepPlain decodes a command as json.Unmarshal would, without
// reflection (but for an HTTP call), for the commands AppendExecuteStep
// writes and any other plainjson.Reader reads exactly. It reports false for
// anything else, which the caller then decodes with json.Unmarshal, so that
// every other input, valid or not, is read (or refused) exactly as before.
func parseExecuteStepPlain(body []byte) (ExecuteStep, bool) {
	var c ExecuteStep
	r := plainjson.NewReader(body)
	for name, v := r.Begin(); r.Next(&name, &v); {
		switch string(name) { // no allocation: the compiler compares the bytes
		case "taskId":
			c.TaskID = r.Str(v)
		case "workflow":
			c.Workflow = r.Str(v)
		case "step":
			c.Step = r.Str(v)
		case "agent":
			c.Agent = r.Str(v)
		case "action":
			c.Action = knownString(&r, v, ActionExecute, ActionCompensate)
		case "compensation":
			c.Compensation = r.Str(v)
		case "attempt":
			c.Attempt = r.Int(v)
		case "completeBy":
			c.CompleteBy = r.Time(v)
		case "idempotencyKey":
			c.IdempotencyKey = r.Str(v)
		case "workflowVersion":
			c.WorkflowVersion = r.Int(v)
		case "order":
			c.Order = r.Raw(v)
		case "results":
			if c.Results != nil { // json.Unmarshal would merge the two
				r.Fail()
			}
			c.Results = r.RawMap(v)
		case "result":
			c.Result = r.Raw(v)
		case "http":
			// Rare (the built-in HTTP agent's commands): decoded as
			// json.Unmarshal decodes the member, into a fresh call.
			if c.HTTP != nil || json.Unmarshal(v, &c.HTTP) != nil {
				r.Fail()
			}
		case "priority":
			c.Priority = domain.Priority(knownString(&r, v, string(domain.PriorityHigh), string(domain.PriorityLow)))
		default:
			r.Fail()
		}
	}
	return c, r.OK()
}

// knownString reads a plain string like r.Str, without allocating when it
// is one of known.
func knownString(r *plainjson.Reader, v []byte, known ...string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		for _, k := range known {
			if string(v[1:len(v)-1]) == k {
				return k
			}
		}
	}
	return r.Str(v)
}

// parseTaskStatusPlain decodes a status as json.Unmarshal would, without
// reflection, for the statuses the engine writes and any other
// plainjson.Reader reads exactly; it reports false for anything else, which
// the caller then decodes with json.Unmarshal.
func parseTaskStatusPlain(body []byte) (TaskStatus, bool) {
	var s TaskStatus
	r := plainjson.NewReader(body)
	for name, v := r.Begin(); r.Next(&name, &v); {
		switch string(name) {
		case "orderId":
			s.OrderID = r.Str(v)
		case "status":
			s.Status = knownString(&r, v, StatusReceived, StatusStepDispatched, StatusStepSucceeded, StatusProcessed)
		case "state":
			s.State = domain.TaskState(knownString(&r, v, string(domain.StateProcessing), string(domain.StateProcessed),
				string(domain.StatePending), string(domain.StateCompensating), string(domain.StateCompensated), string(domain.StateError)))
		case "step":
			s.Step = r.Str(v)
		case "attempt":
			s.Attempt = r.Int(v)
		case "reason":
			s.Reason = r.Str(v)
		case "workflow":
			s.Workflow = r.Str(v)
		case "workflowVersion":
			s.WorkflowVersion = r.Int(v)
		case "priority":
			s.Priority = domain.Priority(knownString(&r, v, string(domain.PriorityNormal), string(domain.PriorityHigh),
				string(domain.PriorityLow)))
		case "result":
			s.Result = r.Raw(v)
		case "revision":
			s.Revision = r.Uint64(v)
		case "time":
			s.Time = r.Time(v)
		default:
			r.Fail()
		}
	}
	return s, r.OK()
}
