package domain

import "time"

// The documented defaults of a step (docs/workflows.md) are kept here, in
// one place: ParseDefinition starts every step from them, and
// Workflow.WithDefaults fills them into a workflow built in Go.

// stepDefaults are the values a step takes when it does not set them.
type stepDefaults struct {
	budget      time.Duration
	attempts    int
	backoff     Backoff
	onExhausted ExhaustedPolicy
}

// documentedDefaults returns the defaults of a workflow that sets none.
func documentedDefaults() stepDefaults {
	return stepDefaults{budget: DefaultStepBudget, attempts: DefaultStepAttempts, backoff: DefaultBackoff, onExhausted: CompensateOnExhausted}
}

// step returns a step that sets nothing, with the defaults filled in.
func (d stepDefaults) step() StepDefinition {
	return StepDefinition{Budget: d.budget, MaxAttempts: d.attempts, Backoff: d.backoff, OnExhausted: d.onExhausted}
}

// compensationOf returns a compensation of s that sets nothing: it takes
// the step's budget and backoff, and DefaultCompensationAttempts.
func compensationOf(s StepDefinition) CompensationDefinition {
	return CompensationDefinition{Budget: s.Budget, MaxAttempts: DefaultCompensationAttempts, Backoff: s.Backoff}
}

// defaultAction is the compensating action of a step whose compensation
// names none.
func defaultAction(step string) string { return "undo-" + step }

// WithDefaults returns a copy of w in which every step and compensation
// field left at its zero value takes the default a definition file gives
// it when the field is left out: budget, attempts, backoff and onExhausted
// of a step; budget, attempts, backoff and action of a compensation (the
// step's budget and backoff, DefaultCompensationAttempts, undo-STEP). A Backoff is one value:
// only the zero Backoff takes the default, one with any field set is kept
// as it is (and Validate refuses a multiplier below 1, as in a file). A
// workflow built in Go calls it, or has it called by the registry, so
// that it means what the same file would.
func (w *Workflow) WithDefaults() *Workflow {
	c := *w
	c.Steps = append([]StepDefinition(nil), w.Steps...)
	d := documentedDefaults().step()
	for i := range c.Steps {
		s := &c.Steps[i]
		if s.Await != nil && s.MaxAttempts == 0 {
			s.MaxAttempts = 1 // an await waits once
		}
		fillStepTiming(&s.Budget, &s.MaxAttempts, &s.Backoff, d.Budget, d.MaxAttempts, d.Backoff)
		if s.OnExhausted == "" {
			s.OnExhausted = d.OnExhausted
		}
		if s.Compensation != nil {
			comp := *s.Compensation
			cd := compensationOf(*s)
			fillStepTiming(&comp.Budget, &comp.MaxAttempts, &comp.Backoff, cd.Budget, cd.MaxAttempts, cd.Backoff)
			if comp.Action == "" {
				comp.Action = defaultAction(s.Name)
			}
			s.Compensation = &comp
		}
	}
	return &c
}

// fillStepTiming sets each of budget, attempts and backoff that is zero to
// its default.
func fillStepTiming(budget *time.Duration, attempts *int, backoff *Backoff, defBudget time.Duration, defAttempts int, defBackoff Backoff) {
	if *budget == 0 {
		*budget = defBudget
	}
	if *attempts == 0 {
		*attempts = defAttempts
	}
	if *backoff == (Backoff{}) {
		*backoff = defBackoff
	}
}
