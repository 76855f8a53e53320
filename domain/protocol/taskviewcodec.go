package protocol

import "github.com/sagaengine/saga/domain/internal/plainjson"

// The task view stores every task it folds as the JSON of its TaskView and
// of its Summary, on every commit: encoded here without reflection, to the
// same bytes json.Marshal gives (the API serves the rows as stored).

// AppendTaskView appends the JSON encoding of v to dst: the same bytes
// json.Marshal(v) gives, without reflection. A time json.Marshal refuses or
// writes in a form plainjson does not, or an invalid result, goes through
// json.Marshal itself, which gives the same bytes or error.
func AppendTaskView(dst []byte, v *TaskView) ([]byte, error) {
	return appendTaskView(dst, v, true)
}

// AppendTaskSummary appends the JSON encoding of v's Summary to dst: the
// same bytes json.Marshal(v.Summary()) gives, without building the summary
// or reflection.
func AppendTaskSummary(dst []byte, v *TaskView) ([]byte, error) {
	return appendTaskView(dst, v, false)
}

// appendTaskView appends v, with its steps' results or, as its Summary,
// with their sizes instead.
func appendTaskView(dst []byte, v *TaskView, withResults bool) ([]byte, error) {
	if v == nil {
		return append(dst, "null"...), nil
	}
	w := plainjson.NewWriter(dst)
	w.EscapedStr('{', "id", v.ID)
	w.EscapedStr(',', "workflow", v.Workflow)
	w.Int(',', "workflowVersion", int64(v.WorkflowVersion))
	w.EscapedStr(',', "state", string(v.State))
	w.Key(',', "steps")
	if v.Steps == nil {
		w.Verbatim([]byte("null"))
	} else {
		w.Byte('[')
		for i, s := range v.Steps {
			if i > 0 {
				w.Byte(',')
			}
			appendStepView(&w, s, withResults)
		}
		w.Byte(']')
	}
	w.OmitEmptyStr("priority", string(v.Priority))
	w.OmitEmptyStr("replyTo", v.ReplyTo)
	w.OmitEmptyStr("reason", v.Reason)
	w.OmitEmptyStr("failedStep", v.FailedStep)
	if v.Compensating {
		w.Key(',', "compensating")
		w.Verbatim([]byte("true"))
	}
	w.OmitEmptyStr("cancelledBy", v.CancelledBy)
	w.OmitEmptyStr("traceparent", v.TraceParent)
	w.OmitEmptyInt("leaseTerm", v.LeaseTerm)
	w.Int(',', "revision", v.Revision)
	w.Time(',', "submittedAt", v.SubmittedAt)
	w.Time(',', "updatedAt", v.UpdatedAt)
	w.Byte('}')
	if !w.OK() {
		if withResults {
			return marshalAppend(dst, v)
		}
		return marshalAppend(dst, v.Summary())
	}
	return w.Bytes(), nil
}

// appendStepView appends s, with its result or, as in a Summary, with its
// result's size instead.
func appendStepView(w *plainjson.Writer, s *StepView, withResult bool) {
	if s == nil {
		w.Verbatim([]byte("null"))
		return
	}
	w.EscapedStr('{', "name", s.Name)
	w.OmitEmptyStr("agent", s.Agent)
	appendLegMembers(w, ',', &s.LegView)
	resultBytes := s.ResultBytes
	if withResult {
		if len(s.Result) > 0 {
			w.Raw(',', "result", s.Result)
		}
	} else {
		resultBytes = len(s.Result)
	}
	w.OmitEmptyInt("resultBytes", int64(resultBytes))
	if s.Compensation != nil {
		w.Key(',', "compensation")
		appendLegMembers(w, '{', s.Compensation)
		w.Byte('}')
	}
	w.OmitEmptyInt("endedRevision", s.EndedRevision)
	if a := s.Awaiting; a != nil {
		w.Key(',', "awaiting")
		w.EscapedStr('{', "topic", a.Topic)
		w.EscapedStr(',', "value", a.Value)
		w.Time(',', "until", a.Until)
		w.Byte('}')
	}
	w.OmitEmptyTime("delayedUntil", s.DelayedUntil)
	w.Byte('}')
}

// appendLegMembers appends the members of l, the first after sep.
func appendLegMembers(w *plainjson.Writer, sep byte, l *LegView) {
	w.EscapedStr(sep, "state", string(l.State))
	w.Int(',', "attempt", int64(l.Attempt))
	w.OmitEmptyStr("lockedBy", l.LockedBy)
	w.OmitEmptyTime("completeBy", l.CompleteBy)
	w.OmitEmptyTime("notBefore", l.NotBefore)
	w.Int(',', "failureCount", int64(l.FailureCount))
	w.OmitEmptyStr("lastFailure", string(l.LastFailure))
	w.OmitEmptyStr("lastError", l.LastError)
	w.OmitEmptyStr("idempotencyKey", l.IdempotencyKey)
	w.OmitEmptyTime("dispatchedAt", l.DispatchedAt)
	w.OmitEmptyInt("attemptBase", int64(l.AttemptBase))
	w.OmitEmptyTime("waitingSince", l.WaitingSince)
	w.OmitEmptyStr("waitReason", l.WaitReason)
	w.OmitEmptyInt("tries", int64(l.Tries))
	w.OmitEmptyInt("returned", int64(l.Returned))
	w.OmitEmptyStr("lastReturn", l.LastReturn)
	w.OmitEmptyStr("instance", l.Instance)
}
