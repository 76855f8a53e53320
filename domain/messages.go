package domain

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrInvalidMessage is returned for a message from outside (an order, a
// reply, a command) that cannot be accepted; the wrapped text says why.
var ErrInvalidMessage = errors.New("invalid message")

// Topic and agent naming.
const (
	// CommandTopicPrefix starts the command topic of every agent.
	CommandTopicPrefix = "saga.cmd."
	// RepliesTopic carries every agent's replies to the scheduler.
	RepliesTopic = "saga.replies"
	// StatusTopic carries status messages of every task.
	StatusTopic = "saga.status"
	// DeadLetterTopic keeps input that could not be processed, with the reason.
	DeadLetterTopic = "saga.deadletter"
	// AlertsTopic carries alerts for operators.
	AlertsTopic = "saga.alerts"
	// OrdersTopic is the default input topic of orders.
	OrdersTopic = "orders"
)

// CommandTopic names the topic an agent consumes.
func CommandTopic(agent string) string { return CommandTopicPrefix + agent }

// maxIDLength bounds order ids, which become stream names and Kafka keys.
const maxIDLength = 200

var (
	idPattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]*$`)
	topicPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)
)

// OrderPlaced is a message that starts a task, as read through its
// workflow's trigger. In saga's own shape its JSON body carries orderId,
// and may carry workflow (default DefaultWorkflow), workflowVersion (default
// the newest) and replyTo, a topic that receives the task's status
// messages. The whole body is kept as the order.
type OrderPlaced struct {
	OrderID         string `json:"orderId"`
	Workflow        string `json:"workflow,omitempty"`
	WorkflowVersion int    `json:"workflowVersion,omitempty"`
	ReplyTo         string `json:"replyTo,omitempty"`
	// Raw is the whole message body.
	Raw json.RawMessage `json:"-"`
}

func invalidf(format string, args ...any) error {
	return errors.Wrapf(ErrInvalidMessage, format, args...)
}

// OrderDocument is the decoded body of a message that may start a task,
// before a workflow is chosen for it.
type OrderDocument struct {
	raw  json.RawMessage
	tree map[string]any
}

// ParseOrderDocument checks that body is a JSON object of at most maxSize
// bytes (no limit if maxSize is 0) and decodes it.
func ParseOrderDocument(body []byte, maxSize int) (OrderDocument, error) {
	var d OrderDocument
	if maxSize > 0 && len(body) > maxSize {
		return d, invalidf("order is %d bytes, over the limit of %d", len(body), maxSize)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return d, invalidf("order is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	if err := dec.Decode(&d.tree); err != nil {
		return d, invalidf("order is not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return d, invalidf("order is not valid JSON: data after the object")
	}
	d.raw = json.RawMessage(trimmed)
	return d, nil
}

// Lookup returns the value at a JSON pointer (RFC 6901).
func (d OrderDocument) Lookup(pointer string) (any, bool) {
	if pointer == "" || pointer[0] != '/' {
		return nil, false
	}
	var v any = d.tree
	for _, seg := range strings.Split(pointer[1:], "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		switch node := v.(type) {
		case map[string]any:
			next, ok := node[seg]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(node) {
				return nil, false
			}
			v = node[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// text returns the string (or number, as text) at a pointer; absent and
// null are empty.
func (d OrderDocument) text(pointer, name string) (string, error) {
	v, ok := d.Lookup(pointer)
	switch v := v.(type) {
	case nil:
		_ = ok
		return "", nil
	case string:
		return v, nil
	case json.Number:
		return string(v), nil
	}
	return "", invalidf("%s at %s must be a string", name, pointer)
}

// Requested returns the workflow and version a saga-shaped order asks for
// in its workflow and workflowVersion fields; empty and 0 when it does not.
func (d OrderDocument) Requested() (workflow string, version int, err error) {
	if workflow, err = d.text("/workflow", "workflow"); err != nil {
		return "", 0, err
	}
	if v, ok := d.Lookup("/workflowVersion"); ok && v != nil {
		n, isNum := v.(json.Number)
		i, convErr := strconv.Atoi(string(n))
		if !isNum || convErr != nil || i < 1 {
			return "", 0, invalidf("workflowVersion must be a whole number from 1")
		}
		version = i
	}
	return workflow, version, nil
}

// ReplyTo returns the reply topic the order names at the trigger's
// ReplyToField (default /replyTo), if it names a valid one; it lets a
// rejection reach a caller even before a workflow is chosen.
func (d OrderDocument) ReplyTo(tr Trigger) string {
	pointer := tr.ReplyToField
	if pointer == "" {
		pointer = DefaultReplyToField
	}
	s, err := d.text(pointer, "replyTo")
	if err != nil || !topicPattern.MatchString(s) {
		return ""
	}
	return s
}

// Matches reports whether the message, arrived on topic with CloudEvents
// type ceType (may be empty), is one the trigger starts a task for.
func (d OrderDocument) Matches(tr Trigger, topic, ceType string) bool {
	if !slices.Contains(tr.TopicsOrDefault(), topic) {
		return false
	}
	if tr.Type == "" {
		return true
	}
	if tr.TypeField != "" {
		got, err := d.text(tr.TypeField, "type")
		return err == nil && got == tr.Type
	}
	return ceType == tr.Type
}

// Order reads the order as the workflow's trigger says: the task id from
// IDField (or the record key), the reply topic from ReplyToField.
func (d OrderDocument) Order(wf *Workflow, key string) (OrderPlaced, error) {
	o := OrderPlaced{Workflow: wf.Name, WorkflowVersion: wf.Version, Raw: d.raw}
	var err error
	switch idField := wf.Trigger.IDField; idField {
	case KeyIDField:
		o.OrderID = key
		if key == "" {
			return o, invalidf("order has no record key to use as its id")
		}
	default:
		if idField == "" {
			idField = DefaultIDField
		}
		if o.OrderID, err = d.text(idField, "the order id"); err != nil {
			return o, err
		}
		if o.OrderID == "" {
			if idField == DefaultIDField {
				return o, invalidf("order has no orderId")
			}
			return o, invalidf("order has no id at %s", idField)
		}
	}
	replyField := wf.Trigger.ReplyToField
	if replyField == "" {
		replyField = DefaultReplyToField
	}
	if o.ReplyTo, err = d.text(replyField, "replyTo"); err != nil {
		return o, err
	}
	switch {
	case len(o.OrderID) > maxIDLength || !idPattern.MatchString(o.OrderID):
		return o, invalidf("orderId %q must be 1 to %d letters, digits or ._:@- and start with a letter or digit", truncate(o.OrderID), maxIDLength)
	case o.ReplyTo != "" && !topicPattern.MatchString(o.ReplyTo):
		return o, invalidf("replyTo %q is not a valid topic name", truncate(o.ReplyTo))
	}
	return o, nil
}

// ParseOrder decodes and validates an order in saga's own shape, on the
// default trigger, for the workflow it names (DefaultWorkflow if none).
func ParseOrder(body []byte, maxSize int) (OrderPlaced, error) {
	doc, err := ParseOrderDocument(body, maxSize)
	if err != nil {
		return OrderPlaced{}, err
	}
	name, version, err := doc.Requested()
	if err != nil {
		return OrderPlaced{}, err
	}
	if name == "" {
		name = DefaultWorkflow
	}
	return doc.Order(&Workflow{Name: name, Version: version}, "")
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Actions an agent is asked to carry out.
const (
	ActionExecute    = "execute"
	ActionCompensate = "compensate"
)

// ExecuteStep is the command an agent receives on its command topic. The
// agent must finish before CompleteBy and send IdempotencyKey to the remote
// service; after CompleteBy it must not reply.
type ExecuteStep struct {
	TaskID   string `json:"taskId"`
	Workflow string `json:"workflow"`
	Step     string `json:"step"`
	Agent    string `json:"agent"`
	Action   string `json:"action"`
	// Compensation names the compensating action when Action is compensate.
	Compensation   string    `json:"compensation,omitempty"`
	Attempt        int       `json:"attempt"`
	CompleteBy     time.Time `json:"completeBy"`
	IdempotencyKey string    `json:"idempotencyKey"`
	// WorkflowVersion is the version of the workflow the task runs.
	WorkflowVersion int             `json:"workflowVersion,omitempty"`
	Order           json.RawMessage `json:"order,omitempty"`
	// Results are the results of the task's steps that succeeded before
	// this one (for a compensation: of every step that succeeded), by step.
	Results map[string]json.RawMessage `json:"results,omitempty"`
	// Result is, in a compensation, the result of the step being undone.
	Result json.RawMessage `json:"result,omitempty"`
	// HTTP is the call to make, for steps run by the built-in HTTP agent.
	HTTP *HTTPCall `json:"http,omitempty"`
	// TraceParent travels as the traceparent header, not in the body.
	TraceParent string `json:"-"`
}

// ParseExecuteStep decodes and validates a command.
func ParseExecuteStep(body []byte) (ExecuteStep, error) {
	var c ExecuteStep
	if err := strictDecode(body, &c); err != nil {
		return c, invalidf("command: %v", err)
	}
	switch {
	case c.TaskID == "" || c.Step == "" || c.IdempotencyKey == "":
		return c, invalidf("command lacks taskId, step or idempotencyKey")
	case c.Attempt < 1:
		return c, invalidf("command attempt %d is not positive", c.Attempt)
	case c.CompleteBy.IsZero():
		return c, invalidf("command has no completeBy")
	case c.Action != ActionExecute && c.Action != ActionCompensate:
		return c, invalidf("command action %q is neither %s nor %s", c.Action, ActionExecute, ActionCompensate)
	}
	return c, nil
}

// Reply outcomes.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
)

// StepReply is an agent's answer to a command, sent to RepliesTopic.
type StepReply struct {
	TaskID  string          `json:"taskId"`
	Step    string          `json:"step"`
	Action  string          `json:"action"`
	Attempt int             `json:"attempt"`
	Outcome string          `json:"outcome"`
	Failure FailureKind     `json:"failure,omitempty"`
	Reason  string          `json:"reason,omitempty"`
	Agent   string          `json:"agent,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	// TraceParent travels as the traceparent header, not in the body.
	TraceParent string `json:"-"`
}

// ParseStepReply decodes and validates a reply.
func ParseStepReply(body []byte) (StepReply, error) {
	var r StepReply
	if err := strictDecode(body, &r); err != nil {
		return r, invalidf("reply: %v", err)
	}
	switch {
	case r.TaskID == "" || r.Step == "":
		return r, invalidf("reply lacks taskId or step")
	case r.Attempt < 1:
		return r, invalidf("reply attempt %d is not positive", r.Attempt)
	case r.Outcome != OutcomeSucceeded && r.Outcome != OutcomeFailed:
		return r, invalidf("reply outcome %q is neither %s nor %s", r.Outcome, OutcomeSucceeded, OutcomeFailed)
	case r.Outcome == OutcomeFailed && r.Failure != FailureTransient && r.Failure != FailurePermanent:
		return r, invalidf("failed reply must say failure %s or %s", FailureTransient, FailurePermanent)
	}
	if r.Action == "" {
		r.Action = ActionExecute
	}
	return r, nil
}

func strictDecode(body []byte, into any) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return errors.New("not a JSON object")
	}
	if err := json.Unmarshal(trimmed, into); err != nil {
		return errors.Newf("not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// CloudEvents types of the messages saga puts on Kafka (the ce_type header).
// Like event wire names they are stable.
const (
	// OrderPlacedMessageType is the type a CloudEvents order may carry.
	OrderPlacedMessageType = "saga.order.placed"
	// ExecuteStepMessageType is the type of agent commands.
	ExecuteStepMessageType = "saga.step.execute"
	// StepReplyMessageType is the type of agent replies.
	StepReplyMessageType = "saga.step.reply"
	// DeadLetteredMessageType is the type of dead-letter records.
	DeadLetteredMessageType = "saga.deadlettered"
)

// AlertMessageType is the CloudEvents type of alerts on AlertsTopic.
const AlertMessageType = "saga.alert.raised"

// Alert tells operators that a task stopped in Error and needs them. Alerts
// are delivered at least once: Revision (of the TaskFailed event) lets a
// consumer drop repeats.
type Alert struct {
	TaskID   string    `json:"taskId"`
	Workflow string    `json:"workflow"`
	State    TaskState `json:"state"`
	Step     string    `json:"step,omitempty"`
	Reason   string    `json:"reason"`
	Revision int64     `json:"revision"`
	At       time.Time `json:"at"`
}

// StatusMessageType is the CloudEvents type of task status messages.
const StatusMessageType = "saga.task.status"

// Status names, one for every kind of task event. Like event wire names
// they are stable.
const (
	StatusReceived               = "received"
	StatusStepDispatched         = "step-dispatched"
	StatusStepSucceeded          = "step-succeeded"
	StatusStepFailed             = "step-failed"
	StatusStepTimedOut           = "step-timed-out"
	StatusStepRetrying           = "step-retrying"
	StatusCompensating           = "compensating"
	StatusCompensationDispatched = "compensation-dispatched"
	StatusStepCompensated        = "step-compensated"
	StatusCompensationFailed     = "compensation-failed"
	StatusStepResubmitted        = "step-resubmitted"
	StatusProcessed              = "processed"
	StatusCompensated            = "compensated"
	StatusFailed                 = "failed"
	// StatusRejected is sent for an order that did not become a task
	// (unknown workflow or version, invalid input); Reason says why.
	StatusRejected = "rejected"
)

// TaskStatus is the status message saga produces for every event of a task,
// to the order's replyTo topic and to StatusTopic. Delivery is at least
// once: Revision (the event's revision in the task stream) lets a consumer
// drop repeats and restore order.
type TaskStatus struct {
	OrderID string    `json:"orderId"`
	Status  string    `json:"status"`
	State   TaskState `json:"state"`
	Step    string    `json:"step,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	// Workflow and WorkflowVersion name what the task runs (on received).
	Workflow        string `json:"workflow,omitempty"`
	WorkflowVersion int    `json:"workflowVersion,omitempty"`
	// Result is a step's result (on step-succeeded).
	Result   json.RawMessage `json:"result,omitempty"`
	Revision uint64          `json:"revision"`
	Time     time.Time       `json:"time"`
	// ReplyTo and TraceParent route the message; they are not in the body.
	ReplyTo     string `json:"-"`
	TraceParent string `json:"-"`
}

// ParseTaskStatus decodes and validates a status message.
func ParseTaskStatus(body []byte) (TaskStatus, error) {
	var s TaskStatus
	if err := strictDecode(body, &s); err != nil {
		return s, invalidf("status: %v", err)
	}
	if s.OrderID == "" || s.Status == "" {
		return s, invalidf("status lacks orderId or status")
	}
	return s, nil
}

// Final reports whether no status follows this one unless an operator acts.
func (s TaskStatus) Final() bool {
	return s.Status == StatusProcessed || s.Status == StatusCompensated || s.Status == StatusFailed || s.Status == StatusRejected
}

// StatusOf is the status message of event e, given the task's state after
// it, the event's revision and the time it was recorded.
func StatusOf(t *Task, e Event, revision uint64, at time.Time) TaskStatus {
	s := TaskStatus{OrderID: t.ID, State: t.State, Revision: revision, Time: at, ReplyTo: t.ReplyTo, TraceParent: t.TraceParent}
	switch e := e.(type) {
	case TaskSubmitted:
		s.Status, s.Workflow, s.WorkflowVersion = StatusReceived, e.Workflow, e.WorkflowVersion
	case StepDispatched:
		s.Status, s.Step, s.Attempt = StatusStepDispatched, e.Step, e.Attempt
	case StepSucceeded:
		s.Status, s.Step, s.Attempt, s.Result = StatusStepSucceeded, e.Step, e.Attempt, e.Result
	case StepFailed:
		s.Status, s.Step, s.Attempt, s.Reason = StatusStepFailed, e.Step, e.Attempt, e.Reason
	case StepTimedOut:
		s.Status, s.Step, s.Attempt = StatusStepTimedOut, e.Step, e.Attempt
	case StepRetryScheduled:
		s.Status, s.Step, s.Attempt = StatusStepRetrying, e.Step, e.Attempt
	case CompensationRequested:
		s.Status, s.Step, s.Reason = StatusCompensating, e.Step, e.Reason
	case TaskCancelled:
		s.Status, s.Reason = StatusCompensating, t.Reason
	case CompensationDispatched:
		s.Status, s.Step, s.Attempt = StatusCompensationDispatched, e.Step, e.Attempt
	case StepCompensated:
		s.Status, s.Step, s.Attempt = StatusStepCompensated, e.Step, e.Attempt
	case CompensationFailed:
		s.Status, s.Step, s.Attempt, s.Reason = StatusCompensationFailed, e.Step, e.Attempt, e.Reason
	case StepResubmitted:
		s.Status, s.Step = StatusStepResubmitted, e.Step
	case TaskProcessed:
		s.Status = StatusProcessed
	case TaskCompensated:
		s.Status = StatusCompensated
	case TaskFailed:
		s.Status, s.Step, s.Reason = StatusFailed, e.Step, e.Reason
	}
	return s
}
