package protocol

import (
	"encoding/json"
	"slices"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/internal/plainjson"
)

// The messages every order carries (commands, replies, statuses) are
// encoded and decoded here without reflection, exactly as encoding/json
// does (each is a wire contract) or not at all: anything plainjson does not
// handle byte for byte goes to encoding/json as a whole.

// AppendStepReply appends the JSON encoding of r to dst: the same bytes
// json.Marshal gives (the reply is a wire contract), without reflection or
// allocation for the replies agents send. A field json.Marshal would escape
// or an invalid result goes through json.Marshal itself.
func AppendStepReply(dst []byte, r StepReply) ([]byte, error) {
	w := plainjson.NewWriter(dst)
	w.Str('{', "taskId", r.TaskID)
	w.Str(',', "step", r.Step)
	w.Str(',', "action", r.Action)
	w.Int(',', "attempt", int64(r.Attempt))
	w.Str(',', "outcome", r.Outcome)
	if r.Failure != "" {
		w.Str(',', "failure", string(r.Failure))
	}
	if r.Reason != "" {
		w.Str(',', "reason", r.Reason)
	}
	if r.Agent != "" {
		w.Str(',', "agent", r.Agent)
	}
	if len(r.Result) > 0 {
		w.Raw(',', "result", r.Result)
	}
	if r.Instance != "" {
		w.Str(',', "instance", r.Instance)
	}
	if r.Tries != 0 {
		w.Int(',', "tries", int64(r.Tries))
	}
	if r.Target != "" {
		w.Str(',', "target", r.Target)
	}
	w.Byte('}')
	if !w.OK() {
		body, err := json.Marshal(r)
		return append(dst, body...), err
	}
	return w.Bytes(), nil
}

// parseStepReplyPlain decodes a reply as json.Unmarshal would, without
// reflection, for the replies AppendStepReply writes and any other
// plainjson.Reader reads exactly. It reports false for anything else, which
// the caller then decodes with json.Unmarshal, so that every other input,
// valid or not, is read (or refused) exactly as before.
func parseStepReplyPlain(body []byte) (StepReply, bool) {
	var rep StepReply
	r := plainjson.NewReader(body)
	for name, v := r.Begin(); r.Next(&name, &v); {
		switch string(name) { // no allocation: the compiler compares the bytes
		case "taskId":
			rep.TaskID = r.Str(v)
		case "step":
			rep.Step = r.Str(v)
		case "action":
			rep.Action = knownString(&r, v, ActionExecute, ActionCompensate)
		case "attempt":
			rep.Attempt = r.Int(v)
		case "outcome":
			rep.Outcome = knownString(&r, v, OutcomeSucceeded, OutcomeFailed, OutcomeUnavailable)
		case "failure":
			rep.Failure = domain.FailureKind(knownString(&r, v, string(domain.FailureTransient), string(domain.FailurePermanent)))
		case "reason":
			rep.Reason = r.Str(v)
		case "agent":
			rep.Agent = r.Str(v)
		case "result":
			rep.Result = r.Raw(v)
		case "instance":
			rep.Instance = r.Str(v)
		case "tries":
			rep.Tries = r.Int(v)
		case "target":
			rep.Target = r.Str(v)
		default:
			r.Fail()
		}
	}
	return rep, r.OK()
}

// AppendExecuteStep appends the JSON encoding of c to dst: the same bytes
// json.Marshal gives (the command is a wire contract), with reflection
// only for the HTTP call. A field json.Marshal would escape, a result it
// would escape or a time it refuses goes through json.Marshal itself.
func AppendExecuteStep(dst []byte, c ExecuteStep) ([]byte, error) {
	w := plainjson.NewWriter(dst)
	w.Str('{', "taskId", c.TaskID)
	w.Str(',', "workflow", c.Workflow)
	w.Str(',', "step", c.Step)
	w.Str(',', "agent", c.Agent)
	w.Str(',', "action", c.Action)
	if c.Compensation != "" {
		w.Str(',', "compensation", c.Compensation)
	}
	w.Int(',', "attempt", int64(c.Attempt))
	w.Time(',', "completeBy", c.CompleteBy)
	w.Str(',', "idempotencyKey", c.IdempotencyKey)
	if c.WorkflowVersion != 0 {
		w.Int(',', "workflowVersion", int64(c.WorkflowVersion))
	}
	if len(c.Order) > 0 {
		w.Raw(',', "order", c.Order)
	}
	if len(c.Results) > 0 {
		appendResults(&w, ',', c.Results)
	}
	if len(c.Result) > 0 {
		w.Raw(',', "result", c.Result)
	}
	if c.HTTP != nil {
		call, err := json.Marshal(c.HTTP)
		if err != nil {
			return marshalAppend(dst, c)
		}
		w.Key(',', "http")
		w.Verbatim(call)
	}
	if c.Priority != "" {
		w.Str(',', "priority", string(c.Priority))
	}
	w.Byte('}')
	if !w.OK() {
		return marshalAppend(dst, c)
	}
	return w.Bytes(), nil
}

// marshalAppend appends json.Marshal's encoding of v to dst.
func marshalAppend(dst []byte, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	return append(dst, body...), err
}

// appendResults appends the member "results" after sep: the steps' results
// by step name, in the order json.Marshal writes a map's keys.
func appendResults(w *plainjson.Writer, sep byte, results map[string]json.RawMessage) {
	steps := make([]string, 0, len(results))
	for step := range results {
		steps = append(steps, step)
	}
	slices.Sort(steps)
	w.Key(sep, "results")
	for i, step := range steps {
		sep := byte(',')
		if i == 0 {
			sep = '{'
		}
		w.Byte(sep)
		w.Quoted(step)
		w.Byte(':')
		w.RawValue(results[step])
	}
	w.Byte('}')
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

// AppendTaskStatus appends the JSON encoding of s to dst: the same bytes
// json.Marshal gives (the status is a wire contract), without reflection.
// A field json.Marshal would escape, a result it would escape or a time it
// refuses goes through json.Marshal itself.
func AppendTaskStatus(dst []byte, s TaskStatus) ([]byte, error) {
	w := plainjson.NewWriter(dst)
	w.Str('{', "orderId", s.OrderID)
	w.Str(',', "status", s.Status)
	w.Str(',', "state", string(s.State))
	if s.Step != "" {
		w.Str(',', "step", s.Step)
	}
	if s.Attempt != 0 {
		w.Int(',', "attempt", int64(s.Attempt))
	}
	if s.Reason != "" {
		w.Str(',', "reason", s.Reason)
	}
	if s.Workflow != "" {
		w.Str(',', "workflow", s.Workflow)
	}
	if s.WorkflowVersion != 0 {
		w.Int(',', "workflowVersion", int64(s.WorkflowVersion))
	}
	if s.Priority != "" {
		w.Str(',', "priority", string(s.Priority))
	}
	if len(s.Result) > 0 {
		w.Raw(',', "result", s.Result)
	}
	w.Uint(',', "revision", s.Revision)
	w.Time(',', "time", s.Time)
	w.Byte('}')
	if !w.OK() {
		return marshalAppend(dst, s)
	}
	return w.Bytes(), nil
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
