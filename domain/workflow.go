package domain

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrUnknownWorkflow is returned when an order names a workflow, or a
// version of one, that is not registered.
var ErrUnknownWorkflow = errors.New("unknown workflow")

// ErrInvalidWorkflow is returned for a workflow definition with problems;
// the error lists every one of them (see Problems).
var ErrInvalidWorkflow = errors.New("invalid workflow definition")

// DefaultWorkflow is the workflow of an order that names none.
const DefaultWorkflow = "order"

// HTTPAgent is the agent of steps that declare an HTTP call and name no
// agent: saga's built-in HTTP agent.
const HTTPAgent = "http"

// Limits of a workflow definition.
const (
	// MaxSteps bounds the steps of a workflow.
	MaxSteps = 100
	// MaxResultBytes bounds a step's result; a larger result fails the
	// attempt as a transient failure.
	MaxResultBytes = 64 << 10
)

// Workflow is a list of steps that succeed or fail as a whole; each waits
// for the one before it, or for the steps its After names, so that steps
// may run side by side (a directed acyclic graph, see Predecessors).
// Definitions are data (see ParseDefinition); a registered definition is
// immutable and identified by its name and version.
type Workflow struct {
	Name string
	// Version is set when the definition is registered, from 1; 0 means
	// not registered yet.
	Version     int
	Description string
	// Trigger says which messages start a task of this workflow.
	Trigger Trigger
	// Priority is the priority of tasks whose message names none; empty
	// means PriorityNormal.
	Priority Priority
	// Retention says how long the event store keeps the workflow's
	// finished tasks; the zero value keeps them forever.
	Retention Retention
	Steps     []StepDefinition
}

// DefaultTriggerTopic is the topic of a trigger that names none: saga's
// orders topic (protocol.OrdersTopic).
const DefaultTriggerTopic = "orders"

// Trigger says which messages start a workflow and how to read them. The
// zero value is saga's own order shape on DefaultTriggerTopic, whose
// workflow field names the workflow.
type Trigger struct {
	// Topics the messages arrive on; default DefaultTriggerTopic.
	Topics []string
	// Type, when set, is the event type that starts the workflow: the
	// CloudEvents ce_type header, or the value at TypeField.
	Type string
	// TypeField is a JSON pointer (RFC 6901) to the event type in the body.
	TypeField string
	// IDField is a JSON pointer to the task id in the body, or "key" for
	// the record key; default /orderId.
	IDField string
	// ReplyToField is a JSON pointer to the reply topic; default /replyTo.
	ReplyToField string
	// PriorityField is a JSON pointer to the task's priority (high, normal
	// or low); default /priority.
	PriorityField string
}

// KeyIDField makes the record key the task id.
const KeyIDField = "key"

// Default trigger fields.
const (
	DefaultIDField      = "/orderId"
	DefaultReplyToField = "/replyTo"
)

// TopicsOrDefault returns the trigger's topics, DefaultTriggerTopic if none.
func (t Trigger) TopicsOrDefault() []string {
	if len(t.Topics) == 0 {
		return []string{DefaultTriggerTopic}
	}
	return t.Topics
}

// ExhaustedPolicy says what happens when a step has used its attempts (or
// failed permanently).
type ExhaustedPolicy string

// The policies.
const (
	// CompensateOnExhausted undoes the completed steps in reverse order.
	CompensateOnExhausted ExhaustedPolicy = "compensate"
	// ErrorOnExhausted stops the task in Error for an operator to retry or
	// cancel, and raises an alert.
	ErrorOnExhausted ExhaustedPolicy = "error"
	// WaitOnExhausted keeps retrying, each time after the longest backoff.
	WaitOnExhausted ExhaustedPolicy = "wait"
)

// Backoff spaces the attempts of a step: the wait before retry n (from 1)
// is Initial·Multiplier^(n-1), at most Max, of which the fraction Jitter is
// random.
type Backoff struct {
	Initial    time.Duration `json:"initial"`
	Multiplier float64       `json:"multiplier"`
	Max        time.Duration `json:"max"`
	Jitter     float64       `json:"jitter"`
}

// Delay returns the wait before retry n (from 1), given a random number
// in [0, 1) for the jitter.
func (b Backoff) Delay(n int, random float64) time.Duration {
	d := float64(b.Initial)
	mult := b.Multiplier
	if mult < 1 {
		mult = 1
	}
	for i := 1; i < n && d < float64(b.Max); i++ {
		d *= mult
	}
	if b.Max > 0 && d > float64(b.Max) {
		d = float64(b.Max)
	}
	jitter := d * min(max(b.Jitter, 0), 1)
	return time.Duration(d - jitter + random*jitter)
}

// HTTPCall is a step's (or compensation's) call for the built-in HTTP
// agent. URL, header values and Body are templates over the task's data
// (see Template); the agent renders them for each attempt.
type HTTPCall struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	// Body is a JSON value whose strings are templates; a string that is
	// exactly one placeholder becomes the referenced JSON value. Empty
	// means the default body: the command's task id, step, order and
	// results.
	Body json.RawMessage `json:"body,omitempty"`
	// TransientStatus and PermanentStatus override how answers with these
	// status codes are classified (by default 2xx succeed; 408, 429 and 5xx
	// are transient; other 4xx are permanent).
	TransientStatus []int `json:"transientStatus,omitempty"`
	PermanentStatus []int `json:"permanentStatus,omitempty"`
	// FollowRedirects lets the agent follow redirects, to the URL's own
	// host only; by default a redirect is the answer (a 3xx, which fails
	// the step for good unless TransientStatus names it).
	FollowRedirects bool `json:"followRedirects,omitempty"`
}

// CompensationDefinition says how a step is undone.
type CompensationDefinition struct {
	// Action names the compensating action the agent carries out.
	Action string
	// HTTP is the call that undoes the step, for the built-in HTTP agent.
	HTTP *HTTPCall
	// Budget, MaxAttempts and Backoff work as for the step; a compensation
	// that uses its attempts puts the task in Error for an operator.
	Budget      time.Duration
	MaxAttempts int
	Backoff     Backoff
}

// StepDefinition says how one step runs.
type StepDefinition struct {
	// Name is unique within the workflow and stable: it is stored in events.
	Name string
	// Agent names the agent that carries the step out; its commands go to
	// the topic CommandTopic(Agent).
	Agent string
	// HTTP is the call the built-in HTTP agent makes, if the step is one.
	HTTP *HTTPCall
	// Budget is how long an attempt may take: CompleteBy = dispatch + Budget.
	Budget time.Duration
	// MaxAttempts is the failure threshold: how many attempts transient
	// failures and timeouts may use before OnExhausted applies.
	MaxAttempts int
	// Backoff spaces the attempts.
	Backoff Backoff
	// OnExhausted applies once the attempts are used or a permanent failure
	// is reported. Default CompensateOnExhausted.
	OnExhausted ExhaustedPolicy
	// Compensation undoes the step; nil for a step that cannot or need not
	// be undone (a welcome email cannot be unsent).
	Compensation *CompensationDefinition
	// After names the steps this one waits for (see Predecessors): nil
	// means the step before it in the list, an empty list none, so that
	// the step starts at once.
	After []string
	// When is the step's condition (see ParseCondition); empty means
	// always. A step whose condition is false is skipped.
	When string
	// Await, when set, makes the step wait for an event of the
	// application instead of calling an agent (Agent and HTTP are empty).
	Await *AwaitDefinition
	// Delay, when set, makes the step a timer: it has no Agent, waits,
	// and succeeds when its time comes (see DelayDefinition).
	Delay *DelayDefinition
}

// Step returns the definition of the named step.
func (w *Workflow) Step(name string) (*StepDefinition, bool) {
	for i := range w.Steps {
		if w.Steps[i].Name == name {
			return &w.Steps[i], true
		}
	}
	return nil, false
}

// StepNames lists the workflow's steps in order.
func (w *Workflow) StepNames() []string {
	out := make([]string, len(w.Steps))
	for i, s := range w.Steps {
		out[i] = s.Name
	}
	return out
}

// WithBudget returns a copy of w whose steps and compensations all have the
// given budget and backoff; tests and demos use it to make time pass quickly.
func (w *Workflow) WithBudget(budget time.Duration, backoff Backoff) *Workflow {
	c := *w
	c.Steps = append([]StepDefinition(nil), w.Steps...)
	for i := range c.Steps {
		c.Steps[i].Budget, c.Steps[i].Backoff = budget, backoff
		if comp := c.Steps[i].Compensation; comp != nil {
			cc := *comp
			cc.Budget, cc.Backoff = budget, backoff
			c.Steps[i].Compensation = &cc
		}
	}
	return &c
}

// Agents lists the agents the workflow's steps use, in step order, once each.
func (w *Workflow) Agents() []string {
	var out []string
	for _, s := range w.Steps {
		if s.Agent != "" && !slices.Contains(out, s.Agent) {
			out = append(out, s.Agent)
		}
	}
	return out
}

// DefaultBackoff starts at 200 ms and doubles up to 5 s, a fifth of it random.
var DefaultBackoff = Backoff{Initial: 200 * time.Millisecond, Multiplier: 2, Max: 5 * time.Second, Jitter: 0.2}

// Workflow streams: a stream per workflow with one WorkflowRegistered event
// per version, and a catalog stream that names every workflow once.
const (
	// WorkflowStreamPrefix starts the stream of every workflow.
	WorkflowStreamPrefix = "workflow-"
	// WorkflowCatalogStream names each registered workflow once.
	WorkflowCatalogStream = "saga-workflows"
	// WorkflowRegisteredType records a new version of a workflow; its
	// revision in the workflow's stream is the version minus one.
	WorkflowRegisteredType = "WorkflowRegistered"
	// WorkflowNamedType records a workflow's name in the catalog stream.
	WorkflowNamedType = "WorkflowNamed"
)

// WorkflowStream names the stream of a workflow's versions.
func WorkflowStream(name string) string { return WorkflowStreamPrefix + name }

// WorkflowRegistered records a version of a workflow definition.
type WorkflowRegistered struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	// Definition is the JSON document (MarshalDefinition).
	Definition   json.RawMessage `json:"definition"`
	RegisteredBy string          `json:"registeredBy,omitempty"`
	RegisteredAt time.Time       `json:"registeredAt"`
}

// WorkflowNamed records, in the catalog stream, a version of a workflow:
// one event per registered version, so that one read of the catalog tells
// every instance which workflows changed. Version is 0 in catalogs written
// before versions were recorded there.
type WorkflowNamed struct {
	Name    string `json:"name"`
	Version int    `json:"version,omitempty"`
}

// EventType implementations.
func (WorkflowRegistered) EventType() string { return WorkflowRegisteredType }
func (WorkflowNamed) EventType() string      { return WorkflowNamedType }
