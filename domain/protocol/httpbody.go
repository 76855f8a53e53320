package protocol

import (
	"encoding/json"

	"github.com/sagaengine/saga/domain/internal/plainjson"
)

// httpCommandBody is the body AppendHTTPCommandBody writes, as json.Marshal
// writes it.
type httpCommandBody struct {
	TaskID          string                     `json:"taskId,omitempty"`
	Workflow        string                     `json:"workflow,omitempty"`
	WorkflowVersion int                        `json:"workflowVersion,omitempty"`
	Step            string                     `json:"step,omitempty"`
	Action          string                     `json:"action,omitempty"`
	Attempt         int                        `json:"attempt,omitempty"`
	IdempotencyKey  string                     `json:"idempotencyKey,omitempty"`
	Order           json.RawMessage            `json:"order,omitempty"`
	Results         map[string]json.RawMessage `json:"results,omitempty"`
	Result          json.RawMessage            `json:"result,omitempty"`
}

// AppendHTTPCommandBody appends the JSON body the built-in HTTP agent sends
// when a call gives none: the command's taskId, workflow, workflowVersion,
// step, action, attempt, idempotencyKey, order, results and result, leaving
// out the empty ones. The bytes are those json.Marshal gives (a service may
// compare or sign them); a value it would escape or an invalid raw message
// goes through json.Marshal itself, which refuses the latter.
func AppendHTTPCommandBody(dst []byte, c ExecuteStep) ([]byte, error) {
	w := plainjson.NewWriter(dst)
	sep := byte('{')
	str := func(name, s string) {
		if s != "" {
			w.Str(sep, name, s)
			sep = ','
		}
	}
	num := func(name string, n int) {
		if n != 0 {
			w.Int(sep, name, int64(n))
			sep = ','
		}
	}
	raw := func(name string, m json.RawMessage) {
		if len(m) > 0 {
			w.Raw(sep, name, m)
			sep = ','
		}
	}
	str("taskId", c.TaskID)
	str("workflow", c.Workflow)
	num("workflowVersion", c.WorkflowVersion)
	str("step", c.Step)
	str("action", c.Action)
	num("attempt", c.Attempt)
	str("idempotencyKey", c.IdempotencyKey)
	raw("order", c.Order)
	if len(c.Results) > 0 {
		appendResults(&w, sep, c.Results)
		sep = ','
	}
	raw("result", c.Result)
	if sep == '{' {
		w.Byte('{')
	}
	w.Byte('}')
	if !w.OK() {
		return marshalAppend(dst, httpCommandBody{TaskID: c.TaskID, Workflow: c.Workflow, WorkflowVersion: c.WorkflowVersion,
			Step: c.Step, Action: c.Action, Attempt: c.Attempt, IdempotencyKey: c.IdempotencyKey,
			Order: c.Order, Results: c.Results, Result: c.Result})
	}
	return w.Bytes(), nil
}
