package domain

import "github.com/sagaengine/saga/domain/internal/plainjson"

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
	w := plainjson.NewWriter(dst)
	switch e := e.(type) {
	case StepDispatched:
		w.Str('{', "taskId", e.TaskID)
		w.Str(',', "step", e.Step)
		w.Str(',', "agent", e.Agent)
		if e.Instance != "" {
			w.Str(',', "instance", e.Instance)
		}
		w.Int(',', "attempt", int64(e.Attempt))
		w.Time(',', "completeBy", e.CompleteBy)
		w.Str(',', "lockedBy", e.LockedBy)
		w.Str(',', "idempotencyKey", e.IdempotencyKey)
		w.Time(',', "dispatchedAt", e.DispatchedAt)
	case StepSucceeded:
		w.Str('{', "taskId", e.TaskID)
		w.Str(',', "step", e.Step)
		w.Int(',', "attempt", int64(e.Attempt))
		if len(e.Result) != 0 {
			w.Raw(',', "result", e.Result)
		}
		w.Time(',', "at", e.At)
		answer(&w, e.Answer)
	case TaskSubmitted:
		w.Str('{', "taskId", e.TaskID)
		w.Str(',', "workflow", e.Workflow)
		if e.WorkflowVersion != 0 {
			w.Int(',', "workflowVersion", int64(e.WorkflowVersion))
		}
		w.Strs(',', "steps", e.Steps)
		if e.ReplyTo != "" {
			w.Str(',', "replyTo", e.ReplyTo)
		}
		w.Raw(',', "order", e.Order)
		w.Time(',', "submittedAt", e.SubmittedAt)
		if e.TraceParent != "" {
			w.Str(',', "traceparent", e.TraceParent)
		}
		if e.Priority != "" {
			w.Str(',', "priority", string(e.Priority))
		}
	case TaskProcessed:
		w.Str('{', "taskId", e.TaskID)
		w.Time(',', "at", e.At)
	default:
		return dst, false
	}
	w.Byte('}')
	return w.Bytes(), w.OK()
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

// answer appends an Answer's members, which are inlined in its event.
func answer(w *plainjson.Writer, a Answer) {
	if a.Instance != "" {
		w.Str(',', "instance", a.Instance)
	}
	if a.Tries != 0 {
		w.Int(',', "tries", int64(a.Tries))
	}
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
