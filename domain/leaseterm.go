package domain

import "github.com/cockroachdb/errors"

// ErrStaleLeaseTerm is returned for a supervisor's action in a lease term
// older than one already recorded in the task's stream: a newer leader
// acted on the task since, so this supervisor's lease, clock or timers
// cannot be trusted. It decides nothing.
var ErrStaleLeaseTerm = errors.New("stale supervisor lease term")

// TimeOutInTerm is TimeOut for a supervisor acting in lease term term (its
// fencing token): it refuses the action (ErrStaleLeaseTerm) when the
// task's stream records a newer term, and records term in the
// StepTimedOut. An attempt no longer in flight, or not due, is refused as
// TimeOut refuses it, whatever the term. Appended on the revision it was decided on, the check and
// the append are one atomic step, so an old leader racing a newer one can
// do no harm.
func (t *Task) TimeOutInTerm(wf *Workflow, step string, compensation bool, attempt int, term int64, d Decision) ([]Event, error) {
	events, err := t.TimeOut(wf, step, compensation, attempt, d)
	if err != nil || len(events) == 0 {
		return events, err
	}
	if term < t.LeaseTerm {
		return nil, errors.Wrapf(ErrStaleLeaseTerm, "task %q step %q attempt %d: term %d, but term %d acted already", t.ID, step, attempt, term, t.LeaseTerm)
	}
	if timedOut, ok := events[0].(StepTimedOut); ok {
		timedOut.LeaseTerm = term
		events[0] = timedOut
	}
	return events, nil
}
