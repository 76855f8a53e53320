package domain

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// A step is one of three kinds: a call to an agent (Agent, HTTP), an await
// of the application's own event (Await), or a delay. This file holds the
// await: a step that succeeds when an event of the application, correlated
// to the task, arrives on a topic.

// ErrNotAwaiting is returned when an application event is correlated to a
// task with no step waiting for it: the step has not started yet, already
// ended, or waits for another value or type.
var ErrNotAwaiting = errors.New("no step awaits the event")

// StepStateAwaiting is an await step waiting for its event, until its
// CompleteBy.
const StepStateAwaiting StepState = "Awaiting"

// StepAwaitingType records that an await step began to wait for the
// application's event.
const StepAwaitingType = "StepAwaiting"

// MaxAwaitTypes bounds the types an await lists in succeedOn and failOn
// together.
const MaxAwaitTypes = 32

// AwaitDefinition makes a step wait for an event of the application: it
// succeeds, with the event as its result, when an event of a SucceedOn
// type whose Correlate member equals Value arrives on Topic, and fails
// for good on a FailOn type. The step's Budget is the deadline, counted
// from when it begins to wait.
type AwaitDefinition struct {
	// Topic is the application's topic the event arrives on.
	Topic string
	// TypeField is a JSON pointer to the event's type in its body; empty
	// reads the CloudEvents type (the ce_type header), as triggers do.
	TypeField string
	// Correlate is a JSON pointer to the member of the event that must
	// equal Value.
	Correlate string
	// Value is a template over the order and the results of the steps
	// before (as in http calls), rendered when the step begins to wait.
	Value string
	// SucceedOn and FailOn are the event types that complete the step and
	// that fail it for good.
	SucceedOn, FailOn []string
}

// AwaitedEvent is an application event as correlation reads it.
type AwaitedEvent struct {
	Topic string
	// Type and Value are what the await's TypeField (or the CloudEvents
	// type) and Correlate pointer read from it.
	Type, Value string
	// Body is the event; it becomes the step's result when it succeeds.
	Body json.RawMessage
}

// StepAwaiting records that an await step began to wait for the event of
// Topic whose correlation member is Value, until Until (the step's
// CompleteBy, timed out by the supervisor like an attempt).
type StepAwaiting struct {
	TaskID  string    `json:"taskId"`
	Step    string    `json:"step"`
	Attempt int       `json:"attempt"`
	Topic   string    `json:"topic"`
	Value   string    `json:"value"`
	Until   time.Time `json:"until"`
	At      time.Time `json:"at"`
}

// EventType returns the event's wire name.
func (StepAwaiting) EventType() string { return StepAwaitingType }

// AwaitingFor is what an await step waits for, while it waits.
type AwaitingFor struct {
	Topic string    `json:"topic"`
	Value string    `json:"value"`
	Until time.Time `json:"until"`
}

// AwaitTopics lists the topics the workflow's await steps read, once each.
func (w *Workflow) AwaitTopics() []string {
	var out []string
	for _, s := range w.Steps {
		if s.Await != nil && !slices.Contains(out, s.Await.Topic) {
			out = append(out, s.Await.Topic)
		}
	}
	return out
}

// Read returns the type and correlation value an event on the await's
// topic carries: the type at TypeField (or ceType when it has none) and
// the string or number at Correlate. ok is false when either is missing
// or the body is not a JSON object.
func (a *AwaitDefinition) Read(body []byte, ceType string, maxSize int) (typ, value string, ok bool) {
	doc, err := ParseOrderDocument(body, maxSize)
	if err != nil {
		return "", "", false
	}
	typ = ceType
	if a.TypeField != "" {
		if typ, err = doc.text(a.TypeField, "type"); err != nil {
			return "", "", false
		}
	}
	value, err = doc.text(a.Correlate, "correlation value")
	return typ, value, err == nil && typ != "" && value != ""
}

// Wants reports whether an event of type typ completes the await (it
// succeeds or fails it).
func (a *AwaitDefinition) Wants(typ string) bool {
	return slices.Contains(a.SucceedOn, typ) || slices.Contains(a.FailOn, typ)
}

// await begins the wait of an await step: it renders the correlation
// value and records StepAwaiting, until the step's budget from now.
func (t *Task) await(wf *Workflow, s *Step, def *StepDefinition, d Decision) []Event {
	value, err := RenderText(def.Await.Value, TemplateData{TaskID: t.ID, Workflow: t.Workflow, Version: t.WorkflowVersion, Step: s.Name,
		Attempt: s.Attempt + 1, IdempotencyKey: IdempotencyKey(t.ID, s.Name), Order: t.Order, Results: t.ResultsFor(wf, s.Name)}, nil)
	if err == nil && value == "" {
		err = errors.New("it is empty")
	}
	if err != nil {
		return []Event{TaskFailed{TaskID: t.ID, Step: s.Name, Reason: "await value of step " + s.Name + ": " + err.Error(), At: d.Now}}
	}
	return []Event{StepAwaiting{TaskID: t.ID, Step: s.Name, Attempt: s.Attempt + 1, Topic: def.Await.Topic, Value: value,
		Until: d.Now.Add(def.Budget), At: d.Now}}
}

// awaiting folds StepAwaiting into the step.
func (s *Step) awaiting(e StepAwaiting) {
	until := e.Until
	s.State, s.Attempt, s.CompleteBy, s.NotBefore, s.DispatchedAt = StepStateAwaiting, e.Attempt, &until, nil, e.At
	s.LockedBy, s.Instance, s.WaitingSince, s.WaitReason = "", "", nil, ""
	s.Awaiting = &AwaitingFor{Topic: e.Topic, Value: e.Value, Until: e.Until}
}

// abandonAwaits stops the waits of a task that compensates: what it
// waited for no longer matters, and a later event finds nothing.
func (t *Task) abandonAwaits() {
	for _, s := range t.Steps {
		if s.State == StepStateAwaiting {
			s.State, s.CompleteBy, s.Awaiting = StepStatePending, nil, nil
		}
	}
}

// awaits reports whether the leg waits for an application event.
func (l *Leg) awaits() bool { return l != nil && l.State == StepStateAwaiting }

// Awaits lists the await steps waiting, each with its deadline as
// CompleteBy, for the supervisor to time out like attempts in flight.
func (t *Task) Awaits() []InFlightAttempt {
	var out []InFlightAttempt
	for _, s := range t.Steps {
		if s.awaits() {
			out = append(out, InFlightAttempt{Step: s.Name, Attempt: s.Attempt, CompleteBy: *s.CompleteBy})
		}
	}
	return out
}

// Correlate decides what an application event does to the task: it
// completes the await step waiting for it (StepSucceeded, the event as the
// result) when its type is one of SucceedOn, or fails the step for good
// (StepFailed, permanent) when it is one of FailOn, and continues the task
// in the same decision. An event no step waits for is ErrNotAwaiting.
func (t *Task) Correlate(wf *Workflow, e AwaitedEvent, d Decision) ([]Event, error) {
	if !t.Exists() {
		return nil, errors.Wrapf(ErrTaskNotFound, "%q", t.ID)
	}
	if t.State.Terminal() {
		return nil, errors.Wrapf(ErrNotAwaiting, "task %q is %s", t.ID, t.State)
	}
	for _, s := range t.Steps {
		def, ok := wf.Step(s.Name)
		if !s.awaits() || !ok || def.Await == nil || s.Awaiting.Topic != e.Topic || s.Awaiting.Value != e.Value {
			continue
		}
		var outcome Event
		switch {
		case slices.Contains(def.Await.SucceedOn, e.Type) && len(e.Body) > MaxResultBytes:
			outcome = StepFailed{TaskID: t.ID, Step: s.Name, Attempt: s.Attempt, Failure: FailurePermanent, At: d.Now,
				Reason: fmt.Sprintf("event %s on %s of %d bytes is over the result limit of %d", e.Type, e.Topic, len(e.Body), MaxResultBytes)}
		case slices.Contains(def.Await.SucceedOn, e.Type):
			outcome = StepSucceeded{TaskID: t.ID, Step: s.Name, Attempt: s.Attempt, Result: e.Body, At: d.Now}
		case slices.Contains(def.Await.FailOn, e.Type):
			outcome = StepFailed{TaskID: t.ID, Step: s.Name, Attempt: s.Attempt, Failure: FailurePermanent, At: d.Now,
				Reason: "event " + e.Type + " on " + e.Topic + " for " + e.Value}
		default:
			continue
		}
		return t.settle(wf, []Event{outcome}, d), nil
	}
	return nil, errors.Wrapf(ErrNotAwaiting, "task %q, %s on %s for %q", t.ID, e.Type, e.Topic, e.Value)
}

// awaitField reads a step's await.
func (p *defParser) awaitField(path string, m map[string]any, s *StepDefinition) {
	v, ok := m["await"]
	if !ok || v == nil {
		return
	}
	path = join(path, "await")
	am := p.object(path, v, "topic", "typeField", "correlate", "value", "succeedOn", "failOn")
	a := &AwaitDefinition{}
	s.Await = a
	if _, given := m["attempts"]; !given {
		s.MaxAttempts = 1
	}
	if am == nil {
		return
	}
	for field, into := range map[string]*string{"topic": &a.Topic, "typeField": &a.TypeField, "correlate": &a.Correlate, "value": &a.Value} {
		if v, ok := am[field]; ok {
			*into = p.str(join(path, field), v)
		}
	}
	if v, ok := am["succeedOn"]; ok {
		a.SucceedOn = p.strings(join(path, "succeedOn"), v)
	}
	if v, ok := am["failOn"]; ok {
		a.FailOn = p.strings(join(path, "failOn"), v)
	}
}

// awaitDoc adds a step's await to its JSON document, when it has one.
func awaitDoc(doc map[string]any, s StepDefinition) {
	a := s.Await
	if a == nil {
		return
	}
	if s.Agent == "" {
		delete(doc, "agent")
	}
	ad := map[string]any{"topic": a.Topic, "correlate": a.Correlate, "value": a.Value, "succeedOn": a.SucceedOn}
	if a.TypeField != "" {
		ad["typeField"] = a.TypeField
	}
	if len(a.FailOn) > 0 {
		ad["failOn"] = a.FailOn
	}
	doc["await"] = ad
}

// validateAwait checks an await step: an application topic, pointers, a
// value template over what runs before it, types, and neither an agent
// nor a compensation of its own, and one attempt (its budget is the
// deadline).
func validateAwait(w *Workflow, i int, add func(string, string, ...any)) {
	s := w.Steps[i]
	a := s.Await
	path := fmt.Sprintf("steps[%d]", i)
	apath := path + ".await"
	switch {
	case a.Topic == "":
		add(apath+".topic", "is required")
	case !topicPattern.MatchString(a.Topic):
		add(apath+".topic", "%q is not a valid topic name", truncate(a.Topic))
	case ReservedTopic(a.Topic), strings.HasPrefix(a.Topic, "saga.reply.") || strings.HasPrefix(a.Topic, "reply."):
		add(apath+".topic", "%q is one of saga's own topics or a reply topic; an await reads the application's topics", a.Topic)
	}
	if a.TypeField != "" && !validPointer(a.TypeField) {
		add(apath+".typeField", "%q is not a JSON pointer such as /type", truncate(a.TypeField))
	}
	if a.Correlate == "" {
		add(apath+".correlate", "is required: a JSON pointer to the event's member that must equal value")
	} else if !validPointer(a.Correlate) {
		add(apath+".correlate", "%q is not a JSON pointer such as /orderId", truncate(a.Correlate))
	}
	if a.Value == "" {
		add(apath+".value", "is required: a template such as {{ order.orderId }}")
	} else if n, err := (templateScope{workflow: w, before: i}).check(a.Value); err != nil {
		add(apath+".value", "%v", err)
	} else if n == 0 {
		add(apath+".value", "%q names nothing of the order: every task would wait for the same event", truncate(a.Value))
	}
	if len(a.SucceedOn) == 0 {
		add(apath+".succeedOn", "name at least one event type that completes the step")
	}
	if len(a.SucceedOn)+len(a.FailOn) > MaxAwaitTypes {
		add(apath, "%d types is over the limit of %d", len(a.SucceedOn)+len(a.FailOn), MaxAwaitTypes)
	}
	seen := map[string]string{}
	for _, list := range []struct {
		field string
		types []string
	}{{"succeedOn", a.SucceedOn}, {"failOn", a.FailOn}} {
		field := list.field
		for j, typ := range list.types {
			switch {
			case typ == "":
				add(fmt.Sprintf("%s.%s[%d]", apath, field, j), "must not be empty")
			case seen[typ] != "":
				add(fmt.Sprintf("%s.%s[%d]", apath, field, j), "type %q is also in %s", truncate(typ), seen[typ])
			}
			seen[typ] = field
		}
	}
	if s.Agent != "" || s.HTTP != nil {
		add(path+".agent", "an await step waits for an event and calls no agent: leave out agent and http")
	}
	if s.Compensation != nil {
		add(path+".compensation", "an await step has nothing to undo: undo what the event stands for in a step before it")
	}
	if s.MaxAttempts != 1 {
		add(path+".attempts", "an await step waits once, its budget the deadline: leave attempts out (or 1), not %d", s.MaxAttempts)
	}
}
