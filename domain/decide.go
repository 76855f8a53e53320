package domain

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrStaleReply is returned for a reply that does not answer the attempt in
// flight: a late reply after a timeout or retry, a reply for a finished step
// or task, or a duplicate. It changes nothing and is counted, not treated as
// a fault.
var ErrStaleReply = errors.New("stale reply")

// ErrUnknownStep is returned for a reply or operation naming a step the
// task does not have.
var ErrUnknownStep = errors.New("unknown step")

// ErrTaskNotFound is returned when a trigger names a task never submitted.
var ErrTaskNotFound = errors.New("task not found")

// ErrNotInFlight is returned when a timeout is decided for an attempt that
// is no longer in flight: it was answered, or already timed out.
var ErrNotInFlight = errors.New("attempt not in flight")

// ErrNotDue is returned when a timeout is decided before CompleteBy.
var ErrNotDue = errors.New("complete-by not reached")

// ErrNotAllowed is returned for an operator action the task's state does
// not allow, such as retrying a task that is not in Error.
var ErrNotAllowed = errors.New("not allowed in the task's state")

// Decision carries what a decision needs besides the task.
type Decision struct {
	Now time.Time
	// Actor is the deciding instance; it becomes the LockedBy of dispatches.
	Actor string
	// Random is a number in [0, 1) that sets the backoff jitter, so that
	// decisions stay pure.
	Random float64
	// Admit, when set, says whether a dispatch to agent may go now: the
	// agent has room. own lists the task's attempts that are to be in
	// flight besides this one (its steps running side by side, and the
	// dispatches decided before it in the same decision), which take room
	// too. When it says no, the step waits (StepWaiting, with
	// the reason it gives) and nothing is dispatched. Nil admits every
	// dispatch. It must only read: a decision may be made again (after a
	// conflict, or tentatively while settling) and must change nothing,
	// so the room a dispatch takes is taken by its caller once the
	// dispatch is stored.
	Admit func(agent string, own []InFlightAttempt) Admission
	// ReturnPause is how long a step whose attempt an agent gave back
	// waits before it is dispatched again: zero when another instance may
	// take it now, a pause when none may, so that an agent that keeps
	// giving back is not sent the step in a tight loop.
	ReturnPause time.Duration
}

// Admission is whether a dispatch may go now, and where.
type Admission struct {
	OK bool
	// Instance is the agent instance chosen for the dispatch; empty when
	// the agent's instances are not known.
	Instance string
	// Reason says why a dispatch may not go.
	Reason string
}

// admit asks d.Admit whether a dispatch to agent may go now; it returns the
// event that records the wait when it may not (nil when the leg already
// waits, or when it may).
func (t *Task) admit(d Decision, step, agent string, compensation bool, l *Leg) (wait []Event, instance string, ok bool) {
	if d.Admit == nil {
		return nil, "", true
	}
	a := d.Admit(agent, t.InFlight())
	if a.OK {
		return nil, a.Instance, true
	}
	if l.Waiting() {
		return nil, "", false
	}
	return []Event{StepWaiting{TaskID: t.ID, Step: step, Compensation: compensation, Agent: agent, Reason: a.Reason, At: d.Now}}, "", false
}

// IdempotencyKey is the key an agent passes to its remote service for a
// step of a task. It is the same for every attempt.
func IdempotencyKey(taskID, step string) string { return taskID + "/" + step }

// CompensationKey is the idempotency key of a step's compensation.
func CompensationKey(taskID, step string) string { return taskID + "/" + step + "/compensation" }

// Submit turns a valid order into the event that starts its task;
// traceParent is the order's trace context.
func Submit(order Order, wf *Workflow, traceParent string, now time.Time) TaskSubmitted {
	return TaskSubmitted{
		TaskID: order.ID, Workflow: wf.Name, WorkflowVersion: wf.Version, Steps: wf.StepNames(),
		ReplyTo: order.ReplyTo, Order: order.Body, SubmittedAt: now, TraceParent: traceParent,
		Priority: order.Priority.recorded(),
	}
}

// Next decides what the task needs now: dispatch every step whose
// predecessors are done (or skip it when its condition is false), decide
// after a failed attempt, compensate, or finish. It returns nothing while
// the attempts in flight are all it waits for, while a retry is not yet
// due, and once the task has stopped.
func (t *Task) Next(wf *Workflow, d Decision) []Event {
	events := t.next(wf, d)
	for _, e := range events {
		switch e.(type) {
		case StepSkipped, StepDelayElapsed, StepFailed:
			// What a skip, a delay over at once, or a delay that cannot
			// start lets happen goes in the same decision.
			return t.settle(wf, events, d)
		}
	}
	return events
}

func (t *Task) next(wf *Workflow, d Decision) []Event {
	if !t.Exists() || t.State.Terminal() {
		return nil
	}
	if t.Compensating {
		return t.nextCompensation(wf, d)
	}
	// A failed attempt is decided first, alone: it may end the task.
	for _, s := range t.Steps {
		if s.State == StepStateError {
			return t.afterFailure(wf, s, false, d)
		}
	}
	// cur is the task as the steps started so far leave it, so that each
	// is admitted with the room the ones before it take; a copy is made
	// only when a second step may start.
	cur := t
	var events []Event
	finished := true
	for i := 0; i < len(cur.Steps); i++ {
		s := cur.Steps[i]
		switch s.State {
		case StepStateProcessed, StepStateSkipped:
			continue
		case StepStatePending, StepStateRetrying:
			finished = false
			if s.State == StepStateRetrying && s.NotBefore != nil && d.Now.Before(*s.NotBefore) {
				continue
			}
			if j := wf.stepIndex(s.Name); j >= 0 && !cur.ready(wf, j) || j < 0 && i > 0 && !cur.Steps[i-1].done() {
				continue // a step not in the workflow fails in its turn (dispatch)
			}
			if len(events) > 0 && cur == t {
				// A step a skip made ready is decided by Next's settle.
				cur = t.Clone()
				for _, e := range events {
					cur.Apply(e)
				}
				s = cur.Steps[i]
			}
			started := cur.start(wf, s, d)
			if events == nil {
				events = started
			} else {
				events = append(events[:len(events):len(events)], started...)
			}
			for _, e := range started {
				if _, failed := e.(TaskFailed); failed {
					return events
				}
				if cur != t {
					cur.Apply(e)
				}
			}
		default:
			finished = false
		}
	}
	if finished {
		return []Event{TaskProcessed{TaskID: t.ID, At: d.Now}}
	}
	return events
}

// start dispatches a step whose predecessors are done, or skips it when it
// has not been tried and its condition is false.
func (t *Task) start(wf *Workflow, s *Step, d Decision) []Event {
	if def, ok := wf.Step(s.Name); ok && def.When != "" && s.Attempt == 0 {
		if c, err := ParseCondition(def.When); err != nil {
			return []Event{TaskFailed{TaskID: t.ID, Step: s.Name, Reason: "condition of step " + s.Name + ": " + err.Error(), At: d.Now}}
		} else if !c.Eval(t.Order, t.ResultsFor(wf, s.Name), taskFields(t)) {
			return []Event{StepSkipped{TaskID: t.ID, Step: s.Name, Condition: def.When, At: d.Now}}
		}
	}
	if def, ok := wf.Step(s.Name); ok && def.Await != nil {
		return t.await(wf, s, def, d)
	}
	if def, ok := wf.Step(s.Name); ok && def.Delay != nil {
		return t.startDelay(wf, def, s, d)
	}
	return t.dispatch(wf, s, d)
}

// nextCompensation undoes, one at a time, every step that may have had an
// effect, in the reverse order in which their attempts ended, so that an
// undo never overtakes the action it undoes: it waits first for every
// attempt in flight to answer or time out. The siblings of the step that
// failed are abandoned: they are not tried again.
func (t *Task) nextCompensation(wf *Workflow, d Decision) []Event {
	// The compensation under way goes on first.
	for _, s := range t.Steps {
		if s.Compensation == nil || (s.State != StepStateCompensating && s.State != StepStateError) {
			continue
		}
		c := s.Compensation
		switch c.State {
		case StepStateProcessing:
			return nil
		case StepStateRetrying:
			if c.NotBefore != nil && d.Now.Before(*c.NotBefore) {
				return nil
			}
			return t.dispatchCompensation(wf, s, d)
		case StepStatePending:
			return t.dispatchCompensation(wf, s, d)
		case StepStateError:
			return t.afterFailure(wf, s, true, d)
		}
	}
	var last *Step
	for _, s := range t.Steps {
		switch {
		case s.State == StepStateProcessing:
			return nil
		case s.State == StepStateCompensated || s.State == StepStateSkipped:
		case s.mayHaveEffect() && hasCompensation(wf, s.Name) && (last == nil || s.Ended > last.Ended):
			last = s
		}
	}
	if last != nil {
		return t.dispatchCompensation(wf, last, d)
	}
	return []Event{TaskCompensated{TaskID: t.ID, At: d.Now}}
}

// afterFailure decides what follows a failed attempt of a step (or of its
// compensation): a retry after the backoff while attempts remain, else what
// the step's policy says.
func (t *Task) afterFailure(wf *Workflow, s *Step, compensation bool, d Decision) []Event {
	def, ok := wf.Step(s.Name)
	if !ok {
		return []Event{TaskFailed{TaskID: t.ID, Step: s.Name, Reason: "step " + s.Name + " is not in workflow " + wf.Name, At: d.Now}}
	}
	if compensation {
		c := s.Compensation
		used := c.Attempt - c.AttemptBase
		if def.Compensation != nil && c.LastFailure != FailurePermanent && used < def.Compensation.MaxAttempts {
			return []Event{t.retry(s.Name, true, c.Attempt+1, d.Now.Add(def.Compensation.Backoff.Delay(used, d.Random)), d)}
		}
		return []Event{TaskFailed{TaskID: t.ID, Step: s.Name, At: d.Now,
			Reason: "compensation of step " + s.Name + " failed after " + strconv.Itoa(used) + " attempts: " + c.LastError}}
	}
	used := s.Attempt - s.AttemptBase
	if s.LastFailure != FailurePermanent && used < def.MaxAttempts {
		return []Event{t.retry(s.Name, false, s.Attempt+1, d.Now.Add(def.Backoff.Delay(used, d.Random)), d)}
	}
	reason := "step " + s.Name + " failed after " + strconv.Itoa(used) + " of " + strconv.Itoa(def.MaxAttempts) + " attempts: " + s.LastError
	if s.LastFailure == FailurePermanent {
		reason = "step " + s.Name + " failed permanently: " + s.LastError
	}
	switch {
	case def.OnExhausted == ErrorOnExhausted && t.othersInFlight(s.Name):
		// The task stops once the branches beside this one have answered,
		// so that nothing is in flight while it waits for an operator.
		return nil
	case def.OnExhausted == ErrorOnExhausted:
		return []Event{TaskFailed{TaskID: t.ID, Step: s.Name, Reason: reason, At: d.Now}}
	case def.OnExhausted == WaitOnExhausted && s.LastFailure != FailurePermanent:
		return []Event{t.retry(s.Name, false, s.Attempt+1, d.Now.Add(def.Backoff.Max), d)}
	default:
		return []Event{CompensationRequested{TaskID: t.ID, Step: s.Name, Reason: reason, RequestedBy: d.Actor, At: d.Now}}
	}
}

func (t *Task) retry(step string, compensation bool, attempt int, notBefore time.Time, d Decision) Event {
	return StepRetryScheduled{TaskID: t.ID, Step: step, Compensation: compensation, Attempt: attempt, NotBefore: notBefore, At: d.Now}
}

// dispatch sends the step's next attempt when its agent has room, else
// records that it waits.
func (t *Task) dispatch(wf *Workflow, s *Step, d Decision) []Event {
	def, ok := wf.Step(s.Name)
	if !ok {
		return []Event{TaskFailed{TaskID: t.ID, Step: s.Name, Reason: "step " + s.Name + " is not in workflow " + wf.Name, At: d.Now}}
	}
	wait, instance, ok := t.admit(d, s.Name, def.Agent, false, &s.Leg)
	if !ok {
		return wait
	}
	return []Event{StepDispatched{
		TaskID: t.ID, Step: s.Name, Agent: def.Agent, Instance: instance, Attempt: s.Attempt + 1,
		CompleteBy: d.Now.Add(def.Budget), LockedBy: d.Actor,
		IdempotencyKey: IdempotencyKey(t.ID, s.Name), DispatchedAt: d.Now,
	}}
}

// hasCompensation reports whether the workflow says how to undo the step;
// a step without one is left as it is when the task compensates.
func hasCompensation(wf *Workflow, step string) bool {
	def, ok := wf.Step(step)
	return !ok || def.Compensation != nil
}

// dispatchCompensation sends the next attempt to undo the step when its
// agent has room, else records that it waits.
func (t *Task) dispatchCompensation(wf *Workflow, s *Step, d Decision) []Event {
	def, ok := wf.Step(s.Name)
	if !ok || def.Compensation == nil {
		return []Event{TaskFailed{TaskID: t.ID, Step: s.Name, Reason: "step " + s.Name + " of workflow " + wf.Name + " has no compensation", At: d.Now}}
	}
	attempt, leg := 1, s.Compensation
	if leg != nil {
		attempt = leg.Attempt + 1
	} else {
		leg = &Leg{}
	}
	wait, instance, ok := t.admit(d, s.Name, def.Agent, true, leg)
	if !ok {
		return wait
	}
	return []Event{CompensationDispatched{
		TaskID: t.ID, Step: s.Name, Agent: def.Agent, Instance: instance, Action: def.Compensation.Action, Attempt: attempt,
		CompleteBy: d.Now.Add(def.Compensation.Budget), LockedBy: d.Actor,
		IdempotencyKey: CompensationKey(t.ID, s.Name), DispatchedAt: d.Now,
	}}
}

// settle folds events tentatively and appends whatever Next then decides,
// until nothing more is due, so that one append carries a whole decision.
func (t *Task) settle(wf *Workflow, events []Event, d Decision) []Event {
	after := t.Clone()
	for _, e := range events {
		after.Apply(e)
	}
	for i := 0; i < 3*len(t.Steps)+4; i++ {
		more := after.next(wf, d)
		if len(more) == 0 {
			break
		}
		for _, e := range more {
			after.Apply(e)
		}
		events = append(events, more...)
	}
	return events
}

// Reply is an agent's answer for one attempt of a step or of its
// compensation, as a decision reads it; its wire form is
// protocol.StepReply.
type Reply struct {
	Step string
	// Compensation says the attempt was one of the step's compensation.
	Compensation bool
	Attempt      int
	// Succeeded says the attempt did what it was asked; otherwise Failure
	// says how it failed (anything but FailurePermanent counts as
	// FailureTransient) and Reason why.
	Succeeded bool
	Failure   FailureKind
	Reason    string
	// Result is what the step returned, when it succeeded.
	Result json.RawMessage
	// Unavailable says the agent gave the attempt back without calling its
	// service; Reason says why. The attempt does not count.
	Unavailable bool
	// Instance names the agent instance that answered, when it said.
	Instance string
	// Tries counts the calls the attempt made to the service.
	Tries int
}

// action names what the attempt was, as replies and commands say it.
func (r Reply) action() string {
	if r.Compensation {
		return "compensate"
	}
	return "execute"
}

// RecordReply decides what an agent's reply does: it records the outcome of
// the attempt in flight and continues the task in the same decision. A reply
// for anything but the attempt in flight is ErrStaleReply.
func (t *Task) RecordReply(wf *Workflow, r Reply, d Decision) ([]Event, error) {
	if !t.Exists() {
		return nil, errors.Wrapf(ErrTaskNotFound, "%q", t.ID)
	}
	s := t.Step(r.Step)
	if s == nil {
		return nil, errors.Wrapf(ErrUnknownStep, "task %q has no step %q", t.ID, r.Step)
	}
	leg := &s.Leg
	if r.Compensation {
		leg = s.Compensation
	}
	if t.State.Terminal() || !leg.InFlight() || leg.Attempt != r.Attempt {
		state, attempt := StepStatePending, 0
		if leg != nil {
			state, attempt = leg.State, leg.Attempt
		}
		return nil, errors.Wrapf(ErrStaleReply, "task %q step %q %s attempt %d (now %s attempt %d)", t.ID, r.Step, r.action(), r.Attempt, state, attempt)
	}
	kind := r.Failure
	if kind != FailurePermanent {
		kind = FailureTransient
	}
	if r.Succeeded && len(r.Result) > MaxResultBytes {
		r.Reason = "result of " + strconv.Itoa(len(r.Result)) + " bytes is over the limit of " + strconv.Itoa(MaxResultBytes)
		r.Succeeded, r.Result, kind = false, nil, FailureTransient
	}
	answer := Answer{Instance: r.Instance, Tries: r.Tries}
	var outcome Event
	switch {
	case r.Unavailable:
		ret := StepReturned{TaskID: t.ID, Step: r.Step, Compensation: r.Compensation, Attempt: r.Attempt, Instance: r.Instance, Reason: r.Reason, At: d.Now}
		if d.ReturnPause > 0 {
			notBefore := d.Now.Add(d.ReturnPause)
			ret.NotBefore = &notBefore
		}
		outcome = ret
	case !r.Compensation && r.Succeeded:
		outcome = StepSucceeded{TaskID: t.ID, Step: r.Step, Attempt: r.Attempt, Result: r.Result, At: d.Now, Answer: answer}
	case !r.Compensation:
		outcome = StepFailed{TaskID: t.ID, Step: r.Step, Attempt: r.Attempt, Failure: kind, Reason: r.Reason, At: d.Now, Answer: answer}
	case r.Succeeded:
		outcome = StepCompensated{TaskID: t.ID, Step: r.Step, Attempt: r.Attempt, At: d.Now, Answer: answer}
	default:
		outcome = CompensationFailed{TaskID: t.ID, Step: r.Step, Attempt: r.Attempt, Failure: kind, Reason: r.Reason, At: d.Now, Answer: answer}
	}
	return t.settle(wf, []Event{outcome}, d), nil
}

// TimeOut decides, for a supervisor, that an attempt passed its CompleteBy
// unanswered: it records the timeout and requests what follows (a retry
// after the backoff, compensation, or Error), but dispatches nothing: the
// scheduler carries retries and compensations out.
func (t *Task) TimeOut(wf *Workflow, step string, compensation bool, attempt int, d Decision) ([]Event, error) {
	s := t.Step(step)
	if s == nil {
		return nil, errors.Wrapf(ErrUnknownStep, "task %q has no step %q", t.ID, step)
	}
	leg := &s.Leg
	if compensation {
		leg = s.Compensation
	}
	if t.State.Terminal() || !leg.InFlight() && !leg.awaits() || leg.Attempt != attempt {
		return nil, errors.Wrapf(ErrNotInFlight, "task %q step %q attempt %d", t.ID, step, attempt)
	}
	if d.Now.Before(*leg.CompleteBy) {
		return nil, errors.Wrapf(ErrNotDue, "task %q step %q attempt %d is due at %s", t.ID, step, attempt, leg.CompleteBy.Format(time.RFC3339Nano))
	}
	timedOut := StepTimedOut{TaskID: t.ID, Step: step, Compensation: compensation, Attempt: attempt,
		FailureCount: leg.FailureCount + 1, CompleteBy: *leg.CompleteBy, DetectedBy: d.Actor, At: d.Now}
	events := []Event{timedOut}
	if compensation || !t.Compensating {
		after := t.Clone()
		after.Apply(timedOut)
		events = append(events, after.afterFailure(wf, after.Step(step), compensation, d)...)
	}
	return events, nil
}

// Resubmit is an operator's retry of a task in Error: the failed step (or
// the failed compensation, if the task was compensating) is tried again,
// with its attempt limit counted afresh. step may be empty to mean the one
// that failed. Like the supervisor, an operator only requests: the
// scheduler dispatches.
func (t *Task) Resubmit(wf *Workflow, step, by string, d Decision) ([]Event, error) {
	if !t.Exists() {
		return nil, errors.Wrapf(ErrTaskNotFound, "%q", t.ID)
	}
	if t.State != StateError {
		return nil, errors.Wrapf(ErrNotAllowed, "task %q is %s; only a task in Error can be retried", t.ID, t.State)
	}
	var target *Step
	for _, s := range t.Steps {
		failed := s.State == StepStateError && (!t.Compensating || s.Compensation != nil)
		// By default the step that stopped the task, when several failed
		// side by side.
		if failed && (step == "" && (target == nil || s.Name == t.FailedStep) || s.Name == step) {
			target = s
		}
	}
	if target == nil {
		if step != "" && t.Step(step) == nil {
			return nil, errors.Wrapf(ErrUnknownStep, "task %q has no step %q", t.ID, step)
		}
		return nil, errors.Wrapf(ErrNotAllowed, "task %q has no failed step %q to retry", t.ID, step)
	}
	return []Event{StepResubmitted{TaskID: t.ID, Step: target.Name, Compensation: t.Compensating, By: by, At: d.Now}}, nil
}

// Cancel is an operator's cancellation: the task stops going forward and
// the scheduler undoes what it did. A task that finished, or is already
// compensating, cannot be cancelled.
func (t *Task) Cancel(wf *Workflow, by, reason string, d Decision) ([]Event, error) {
	if !t.Exists() {
		return nil, errors.Wrapf(ErrTaskNotFound, "%q", t.ID)
	}
	if t.Compensating || t.State == StateProcessed || t.State == StateCompensated {
		return nil, errors.Wrapf(ErrNotAllowed, "task %q is %s and cannot be cancelled", t.ID, t.State)
	}
	return []Event{TaskCancelled{TaskID: t.ID, By: by, Reason: reason, At: d.Now}}, nil
}

// othersInFlight reports whether a step other than the named one has an
// attempt in flight.
func (t *Task) othersInFlight(step string) bool {
	for _, s := range t.Steps {
		if s.Name != step && s.InFlight() {
			return true
		}
	}
	return false
}
