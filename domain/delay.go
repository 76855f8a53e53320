package domain

import (
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrNotDelayed is returned when a delay is fired for a step that does not
// wait on it: the delay fired already, the task moved on (it compensates
// or finished), or the step waits until another time.
var ErrNotDelayed = errors.New("step is not delayed")

// StepStateDelayed is a delay step waiting until its time (Step.DelayedUntil).
const StepStateDelayed StepState = "Delayed"

// DelayDefinition makes a step a timer: it calls no agent, waits, and
// succeeds when its time comes. Exactly one of For and Until is set.
type DelayDefinition struct {
	// For is how long the step waits from when it starts.
	For time.Duration
	// Until is a template (see Template) that renders to the RFC 3339 time
	// the step waits until, such as "{{ order.at }}". A time already past
	// ends the wait at once.
	Until string
}

// delayDefinition reads a step's delay: {for: 10m} or {until: "..."}.
func (p *defParser) delayDefinition(path string, v any) *DelayDefinition {
	d := &DelayDefinition{}
	m := p.object(path, v, "for", "until")
	if m == nil {
		return d
	}
	if v, ok := m["for"]; ok {
		d.For = p.duration(join(path, "for"), v)
	}
	if v, ok := m["until"]; ok {
		d.Until = p.str(join(path, "until"), v)
	}
	return d
}

// validateDelay checks a delay step: exactly one of for and until, a
// template over what the step may read, and nothing that calls an agent.
func validateDelay(path string, s StepDefinition, scope templateScope, add func(string, string, ...any)) {
	d := s.Delay
	switch {
	case d.For == 0 && d.Until == "":
		add(path+".delay", "give exactly one of for (a duration) or until (an RFC 3339 time, a template)")
	case d.For != 0 && d.Until != "":
		add(path+".delay", "give for or until, not both")
	case d.For < 0:
		add(path+".delay.for", "must be positive, not %s", d.For)
	case d.Until != "":
		if n, err := scope.check(d.Until); err != nil {
			add(path+".delay.until", "%v", err)
		} else if n == 0 {
			if _, err := parseDelayTime(d.Until); err != nil {
				add(path+".delay.until", "%v", err)
			}
		}
	}
	if s.Agent != "" || s.HTTP != nil {
		add(path+".delay", "a delay step calls no agent: leave out agent and http")
	}
	if s.Compensation != nil {
		add(path+".compensation", "a delay step has nothing to undo")
	}
}

// delayDoc adds a delay step's delay to its JSON document and leaves out
// its empty agent.
func delayDoc(doc map[string]any, s StepDefinition) {
	if s.Delay == nil {
		return
	}
	delete(doc, "agent")
	if s.Delay.Until != "" {
		doc["delay"] = map[string]any{"until": s.Delay.Until}
	} else {
		doc["delay"] = map[string]any{"for": s.Delay.For.String()}
	}
}

// parseDelayTime reads the time a delay waits until.
func parseDelayTime(s string) (time.Time, error) {
	at, err := time.Parse(time.RFC3339, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, errors.Newf("%q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", truncate(s))
	}
	return at, nil
}

// DelayUntil returns the time a delay step of the task waits until when
// it starts at now: now plus For, or the time Until renders to from the
// order and the results of the steps before it.
func (t *Task) DelayUntil(wf *Workflow, def *StepDefinition, now time.Time) (time.Time, error) {
	if def.Delay.Until == "" {
		return now.Add(def.Delay.For), nil
	}
	text, err := RenderText(def.Delay.Until, TemplateData{TaskID: t.ID, Workflow: t.Workflow, Version: t.WorkflowVersion, Step: def.Name,
		Order: t.Order, Results: t.ResultsFor(wf, def.Name)}, nil)
	if err != nil {
		return time.Time{}, err
	}
	return parseDelayTime(text)
}

// startDelay starts a delay step: it records the time the step waits
// until, and that the wait is over at once when that time has come. A
// time the template cannot give fails the step for good.
func (t *Task) startDelay(wf *Workflow, def *StepDefinition, s *Step, d Decision) []Event {
	until, err := t.DelayUntil(wf, def, d.Now)
	if err != nil {
		return []Event{StepFailed{TaskID: t.ID, Step: s.Name, Attempt: s.Attempt, Failure: FailurePermanent,
			Reason: "delay until " + def.Delay.Until + ": " + err.Error(), At: d.Now}}
	}
	events := []Event{StepDelayed{TaskID: t.ID, Step: s.Name, Until: until, At: d.Now}}
	if !d.Now.Before(until) {
		events = append(events, StepDelayElapsed{TaskID: t.ID, Step: s.Name, Until: until, FiredBy: d.Actor, At: d.Now})
	}
	return events
}

// ElapseDelayInTerm decides that a delay step's wait is over, for a
// supervisor acting in lease term term (0 for none): it records
// StepDelayElapsed, with the term, once d.Now has reached until. It is
// ErrNotDue before then (a timer never fires early), ErrNotDelayed when
// the step does not wait until that time (it fired already, or the task
// moved on), and ErrStaleLeaseTerm when the task's stream records a newer
// term. Appended on the revision it was decided on, two supervisors
// cannot both fire it.
func (t *Task) ElapseDelayInTerm(step string, until time.Time, term int64, d Decision) ([]Event, error) {
	if !t.Exists() {
		return nil, errors.Wrapf(ErrTaskNotFound, "%q", t.ID)
	}
	s := t.Step(step)
	if s == nil {
		return nil, errors.Wrapf(ErrUnknownStep, "task %q has no step %q", t.ID, step)
	}
	if t.State.Terminal() || t.Compensating || s.State != StepStateDelayed || s.DelayedUntil == nil || !s.DelayedUntil.Equal(until) {
		return nil, errors.Wrapf(ErrNotDelayed, "task %q step %q is %s", t.ID, step, s.State)
	}
	if d.Now.Before(until) {
		return nil, errors.Wrapf(ErrNotDue, "task %q step %q waits until %s, now %s", t.ID, step,
			until.UTC().Format(time.RFC3339Nano), d.Now.UTC().Format(time.RFC3339Nano))
	}
	if term < t.LeaseTerm {
		return nil, errors.Wrapf(ErrStaleLeaseTerm, "task %q step %q delay: term %d, but term %d acted already", t.ID, step, term, t.LeaseTerm)
	}
	return []Event{StepDelayElapsed{TaskID: t.ID, Step: step, Until: until, FiredBy: d.Actor, At: d.Now, LeaseTerm: term}}, nil
}

// DelayedStep is a delay step waiting until a time.
type DelayedStep struct {
	Step  string
	Until time.Time
}

// Delays lists the task's delay steps that wait.
func (t *Task) Delays() []DelayedStep {
	var out []DelayedStep
	if t.State.Terminal() || t.Compensating {
		return nil
	}
	for _, s := range t.Steps {
		if s.State == StepStateDelayed && s.DelayedUntil != nil {
			out = append(out, DelayedStep{Step: s.Name, Until: *s.DelayedUntil})
		}
	}
	return out
}

// applyDelayed folds StepDelayed: the step waits until its time.
func (t *Task) applyDelayed(e StepDelayed) {
	if s := t.Step(e.Step); s != nil {
		until := e.Until
		s.State, s.DelayedUntil, s.NotBefore = StepStateDelayed, &until, nil
		s.WaitingSince, s.WaitReason = nil, ""
	}
	if !t.Compensating {
		t.State = StateProcessing
	}
	t.UpdatedAt = e.At
}

// applyDelayElapsed folds StepDelayElapsed: the step succeeded.
func (t *Task) applyDelayElapsed(e StepDelayElapsed) {
	if s := t.Step(e.Step); s != nil && s.State == StepStateDelayed {
		s.State, s.Ended = StepStateProcessed, t.Revision
	}
	t.LeaseTerm = max(t.LeaseTerm, e.LeaseTerm)
	t.UpdatedAt = e.At
}

// abandonDelays stops the waits of the delay steps once the task
// compensates: they will not fire, and show as not started (Pending),
// their DelayedUntil kept.
func (t *Task) abandonDelays() {
	for _, s := range t.Steps {
		if s.State == StepStateDelayed {
			s.State = StepStatePending
		}
	}
}
