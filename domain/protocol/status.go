package protocol

import (
	"encoding/json"
	"time"

	"github.com/sagaengine/saga/domain"
)

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
	// StatusStepWaiting says a step waits for room at its agent.
	StatusStepWaiting = "step-waiting"
	// StatusStepSkipped says a step's condition was false: it is not run.
	StatusStepSkipped = "step-skipped"
	// StatusStepReturned says an agent instance gave an attempt back
	// without calling; it is dispatched again.
	StatusStepReturned = "step-returned"
	// StatusStepAwaiting says an await step waits for the application's
	// event; Reason names the topic, the value and the deadline.
	StatusStepAwaiting = "step-awaiting"
	// StatusStepDelayed says a delay step waits until a time (Reason).
	StatusStepDelayed = "step-delayed"
	// StatusStepDelayElapsed says a delay step's time came: it succeeded.
	StatusStepDelayElapsed = "step-delay-elapsed"
	StatusProcessed        = "processed"
	StatusCompensated      = "compensated"
	StatusFailed           = "failed"
	// StatusRejected is sent for an order that did not become a task
	// (unknown workflow or version, invalid input); Reason says why.
	StatusRejected = "rejected"
)

// TaskStatus is the status message saga produces for every event of a task,
// to the order's replyTo topic and to StatusTopic. Delivery is at least
// once: Revision (the event's revision in the task stream) lets a consumer
// drop repeats and restore order.
type TaskStatus struct {
	OrderID string           `json:"orderId"`
	Status  string           `json:"status"`
	State   domain.TaskState `json:"state"`
	Step    string           `json:"step,omitempty"`
	Attempt int              `json:"attempt,omitempty"`
	Reason  string           `json:"reason,omitempty"`
	// Workflow and WorkflowVersion name what the task runs (on received).
	Workflow        string `json:"workflow,omitempty"`
	WorkflowVersion int    `json:"workflowVersion,omitempty"`
	// Priority is the task's priority (on received): high, normal or low.
	Priority domain.Priority `json:"priority,omitempty"`
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
	s, plain := parseTaskStatusPlain(body)
	if !plain {
		s = TaskStatus{}
		if err := strictDecode(body, &s); err != nil {
			return s, invalidf("status: %v", err)
		}
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
func StatusOf(t *domain.Task, e domain.Event, revision uint64, at time.Time) TaskStatus {
	s := TaskStatus{OrderID: t.ID, State: t.State, Revision: revision, Time: at, ReplyTo: t.ReplyTo, TraceParent: t.TraceParent}
	switch e := e.(type) {
	case domain.TaskSubmitted:
		s.Status, s.Workflow, s.WorkflowVersion, s.Priority = StatusReceived, e.Workflow, e.WorkflowVersion, e.Priority.OrNormal()
	case domain.StepDispatched:
		s.Status, s.Step, s.Attempt = StatusStepDispatched, e.Step, e.Attempt
	case domain.StepSucceeded:
		s.Status, s.Step, s.Attempt, s.Result = StatusStepSucceeded, e.Step, e.Attempt, e.Result
	case domain.StepFailed:
		s.Status, s.Step, s.Attempt, s.Reason = StatusStepFailed, e.Step, e.Attempt, e.Reason
	case domain.StepTimedOut:
		s.Status, s.Step, s.Attempt = StatusStepTimedOut, e.Step, e.Attempt
	case domain.StepRetryScheduled:
		s.Status, s.Step, s.Attempt = StatusStepRetrying, e.Step, e.Attempt
	case domain.CompensationRequested:
		s.Status, s.Step, s.Reason = StatusCompensating, e.Step, e.Reason
	case domain.TaskCancelled:
		s.Status, s.Reason = StatusCompensating, t.Reason
	case domain.CompensationDispatched:
		s.Status, s.Step, s.Attempt = StatusCompensationDispatched, e.Step, e.Attempt
	case domain.StepCompensated:
		s.Status, s.Step, s.Attempt = StatusStepCompensated, e.Step, e.Attempt
	case domain.CompensationFailed:
		s.Status, s.Step, s.Attempt, s.Reason = StatusCompensationFailed, e.Step, e.Attempt, e.Reason
	case domain.StepResubmitted:
		s.Status, s.Step = StatusStepResubmitted, e.Step
	case domain.StepWaiting:
		s.Status, s.Step, s.Reason = StatusStepWaiting, e.Step, e.Reason
	case domain.StepSkipped:
		s.Status, s.Step, s.Reason = StatusStepSkipped, e.Step, "condition is false: "+e.Condition
	case domain.StepAwaiting:
		s.Status, s.Step, s.Attempt, s.Reason = StatusStepAwaiting, e.Step, e.Attempt, awaitingReason(e)
	case domain.StepReturned:
		s.Status, s.Step, s.Attempt, s.Reason = StatusStepReturned, e.Step, e.Attempt, e.Reason
	case domain.StepDelayed:
		s.Status, s.Step, s.Reason = StatusStepDelayed, e.Step, "waiting until "+e.Until.UTC().Format(time.RFC3339)
	case domain.StepDelayElapsed:
		s.Status, s.Step = StatusStepDelayElapsed, e.Step
	case domain.TaskProcessed:
		s.Status = StatusProcessed
	case domain.TaskCompensated:
		s.Status = StatusCompensated
	case domain.TaskFailed:
		s.Status, s.Step, s.Reason = StatusFailed, e.Step, e.Reason
	}
	return s
}

// awaitingReason says what an await step waits for, and until when.
func awaitingReason(e domain.StepAwaiting) string {
	return "awaits an event on " + e.Topic + " for " + e.Value + " until " + e.Until.UTC().Format(time.RFC3339)
}
