package protocol

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
)

// invalidf is a domain.ErrInvalidMessage saying why.
func invalidf(format string, args ...any) error {
	return errors.Wrapf(domain.ErrInvalidMessage, format, args...)
}

// strictDecode decodes a JSON object into a message.
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

// ParseOrder decodes and validates an order in saga's own shape (a JSON
// object with orderId, and optionally workflow, workflowVersion and
// replyTo), on the default trigger, for the workflow it names
// (domain.DefaultWorkflow if none). Errors are domain.ErrInvalidMessage.
func ParseOrder(body []byte, maxSize int) (domain.Order, error) {
	doc, err := domain.ParseOrderDocument(body, maxSize)
	if err != nil {
		return domain.Order{}, err
	}
	name, version, err := doc.Requested()
	if err != nil {
		return domain.Order{}, err
	}
	if name == "" {
		name = domain.DefaultWorkflow
	}
	return doc.Order(&domain.Workflow{Name: name, Version: version}, "")
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
	HTTP *domain.HTTPCall `json:"http,omitempty"`
	// Priority is the task's priority, which chose the command's topic
	// (CommandTopicFor); absent for normal.
	Priority domain.Priority `json:"priority,omitempty"`
	// TraceParent travels as the traceparent header, not in the body: the
	// span of the dispatch that sent the command.
	TraceParent string `json:"-"`
	// Route, when set, is the instance the scheduler chose for the
	// command: it is produced to that instance's partition of the topic
	// rather than to the partition of its task id. It is not in the body.
	Route *Route `json:"-"`
}

// Route is the agent instance a command goes to: a partition it consumes
// (AgentHeartbeat.Partitions) of the topic of the command's band or, when
// the group gave it no partition of that band, of another of the agent's
// command topics (Topic). The command's priority field still says its
// priority, which is what the agent orders waiting commands by.
type Route struct {
	Instance  string
	Topic     string
	Partition int32
}

// ParseExecuteStep decodes and validates a command.
func ParseExecuteStep(body []byte) (ExecuteStep, error) {
	c, plain := parseExecuteStepPlain(body)
	if !plain {
		c = ExecuteStep{}
		if err := strictDecode(body, &c); err != nil {
			return c, invalidf("command: %v", err)
		}
	}
	return c, validExecuteStep(c)
}

// validExecuteStep checks a decoded command.
func validExecuteStep(c ExecuteStep) error {
	switch {
	case c.TaskID == "" || c.Step == "" || c.IdempotencyKey == "":
		return invalidf("command lacks taskId, step or idempotencyKey")
	case c.Attempt < 1:
		return invalidf("command attempt %d is not positive", c.Attempt)
	case c.CompleteBy.IsZero():
		return invalidf("command has no completeBy")
	case c.Action != ActionExecute && c.Action != ActionCompensate:
		return invalidf("command action %q is neither %s nor %s", c.Action, ActionExecute, ActionCompensate)
	}
	return nil
}

// TemplateData is what the command's templates (an HTTP step's URL and
// body) are rendered over.
func (c ExecuteStep) TemplateData() domain.TemplateData {
	return domain.TemplateData{TaskID: c.TaskID, Workflow: c.Workflow, Version: c.WorkflowVersion, Step: c.Step,
		Attempt: c.Attempt, IdempotencyKey: c.IdempotencyKey, Order: c.Order, Results: c.Results, Result: c.Result}
}

// Reply outcomes.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	// OutcomeUnavailable says the agent instance gave the command back
	// without calling its service (its breaker is open, its calls hang, it
	// is stopping): the attempt does not count, and the scheduler sends it
	// again, to a healthy instance when there is one. Reason says why.
	OutcomeUnavailable = "unavailable"
)

// StepReply is an agent's answer to a command, sent to RepliesTopic.
type StepReply struct {
	TaskID  string             `json:"taskId"`
	Step    string             `json:"step"`
	Action  string             `json:"action"`
	Attempt int                `json:"attempt"`
	Outcome string             `json:"outcome"`
	Failure domain.FailureKind `json:"failure,omitempty"`
	Reason  string             `json:"reason,omitempty"`
	Agent   string             `json:"agent,omitempty"`
	Result  json.RawMessage    `json:"result,omitempty"`
	// Instance names the agent instance that answered (its heartbeat's
	// instance); empty from agents that send no heartbeats.
	Instance string `json:"instance,omitempty"`
	// Tries counts the calls the attempt made to the service (1 when it
	// made one, 0 when it made none; absent from agents that do not
	// count).
	Tries int `json:"tries,omitempty"`
	// Target, with OutcomeUnavailable, names the one target (a host) the
	// instance refuses to call now: the instance itself takes other work.
	Target string `json:"target,omitempty"`
	// TraceParent travels as the traceparent header, not in the body: the
	// span of the agent's work on the command.
	TraceParent string `json:"-"`
}

// ParseStepReply decodes and validates a reply.
func ParseStepReply(body []byte) (StepReply, error) {
	r, plain := parseStepReplyPlain(body)
	if !plain {
		r = StepReply{}
		if err := strictDecode(body, &r); err != nil {
			return r, invalidf("reply: %v", err)
		}
	}
	switch {
	case r.TaskID == "" || r.Step == "":
		return r, invalidf("reply lacks taskId or step")
	case r.Attempt < 1:
		return r, invalidf("reply attempt %d is not positive", r.Attempt)
	case r.Outcome != OutcomeSucceeded && r.Outcome != OutcomeFailed && r.Outcome != OutcomeUnavailable:
		return r, invalidf("reply outcome %q is not %s, %s or %s", r.Outcome, OutcomeSucceeded, OutcomeFailed, OutcomeUnavailable)
	case r.Tries < 0:
		return r, invalidf("reply tries %d is negative", r.Tries)
	case r.Outcome == OutcomeFailed && r.Failure != domain.FailureTransient && r.Failure != domain.FailurePermanent:
		return r, invalidf("failed reply must say failure %s or %s", domain.FailureTransient, domain.FailurePermanent)
	}
	if r.Action == "" {
		r.Action = ActionExecute
	}
	return r, nil
}

// Reply is the reply as a decision reads it (domain.Task.RecordReply).
func (r StepReply) Reply() domain.Reply {
	return domain.Reply{Step: r.Step, Compensation: r.Action == ActionCompensate, Attempt: r.Attempt,
		Succeeded: r.Outcome == OutcomeSucceeded, Unavailable: r.Outcome == OutcomeUnavailable, Failure: r.Failure, Reason: r.Reason,
		Result: r.Result, Instance: r.Instance, Tries: r.Tries}
}

// Alert kinds: an alert is raised when a task stops in Error and resolved
// when an operator's retry or cancel takes the task out of Error.
const (
	AlertRaised   = "raised"
	AlertResolved = "resolved"
)

// Alert tells operators that a task stopped in Error and needs them
// (Kind AlertRaised), or that it left Error (AlertResolved). Alerts are
// delivered at least once: a consumer drops repeats by TaskID, Kind and
// Revision.
type Alert struct {
	TaskID   string `json:"taskId"`
	Workflow string `json:"workflow"`
	// State is the task's state: Error when raised; when resolved, the
	// state the operator's action took it to (Processing or Compensating).
	State domain.TaskState `json:"state"`
	// Step is the step whose failure, or failed compensation, put the
	// task in Error.
	Step   string `json:"step,omitempty"`
	Reason string `json:"reason"`
	// Revision is the task's revision when raised (its failure's); when
	// resolved, the revision of the event that took the task out of Error,
	// which is greater than the revision of every alert it resolves.
	Revision int64     `json:"revision"`
	At       time.Time `json:"at"`
	// Kind is AlertRaised or AlertResolved; alerts sent before there were
	// resolved alerts have none and are raised ones (ParseAlert says so).
	Kind string `json:"kind,omitempty"`
	// By is, on a resolved alert, the operator who retried or cancelled.
	By string `json:"by,omitempty"`
}

// RaisedAlert is the alert for a task in Error.
func RaisedAlert(t *domain.Task) Alert {
	return Alert{TaskID: t.ID, Workflow: t.Workflow, State: t.State, Step: t.FailedStep, Reason: t.Reason,
		Revision: t.Revision, At: t.UpdatedAt, Kind: AlertRaised}
}

// ResolvedAlert is the alert that resolves those raised for a task in
// Error, for the event e, at revision, that took it out: an operator's
// domain.StepResubmitted or domain.TaskCancelled. t is the task after e;
// failedStep is the step that had failed, which e clears.
func ResolvedAlert(t *domain.Task, failedStep string, e domain.Event, revision uint64) Alert {
	a := Alert{TaskID: t.ID, Workflow: t.Workflow, State: t.State, Step: failedStep, Revision: int64(revision), At: t.UpdatedAt,
		Kind: AlertResolved}
	switch e := e.(type) {
	case domain.StepResubmitted:
		a.By, a.Reason = e.By, "retried by "+e.By
	case domain.TaskCancelled:
		a.By, a.Reason = e.By, t.Reason
	}
	return a
}

// MessageType is the alert's CloudEvents type: AlertMessageType, or
// AlertResolvedMessageType for a resolved one.
func (a Alert) MessageType() string {
	if a.Kind == AlertResolved {
		return AlertResolvedMessageType
	}
	return AlertMessageType
}

// Resolves reports whether a is a resolved alert that resolves raised:
// about the same task, and after it.
func (a Alert) Resolves(raised Alert) bool {
	return a.Kind == AlertResolved && raised.Kind != AlertResolved && a.TaskID == raised.TaskID && a.Revision > raised.Revision
}

// ParseAlert decodes an alert from AlertsTopic. An alert without a kind
// (from a sender before resolved alerts) is a raised one; a kind this
// version does not know is kept as it is, for the caller to pass over, as
// the wire contract may grow. Errors are domain.ErrInvalidMessage.
func ParseAlert(body []byte) (Alert, error) {
	var a Alert
	if err := strictDecode(body, &a); err != nil {
		return a, invalidf("alert: %v", err)
	}
	if a.TaskID == "" {
		return a, invalidf("alert lacks taskId")
	}
	if a.Kind == "" {
		a.Kind = AlertRaised
	}
	return a, nil
}
