package domain

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

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

// Reply is the reply as a decision reads it.
func (r StepReply) Reply() Reply {
	return Reply{Step: r.Step, Compensation: r.Action == ActionCompensate, Attempt: r.Attempt,
		Succeeded: r.Outcome == OutcomeSucceeded, Failure: r.Failure, Reason: r.Reason, Result: r.Result}
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
