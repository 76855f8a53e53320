package domain

import (
	"sort"
	"time"

	"github.com/cockroachdb/errors"
)

// ErrUnknownWorkflow is returned when an order names a workflow the engine
// does not define.
var ErrUnknownWorkflow = errors.New("unknown workflow")

// DefaultWorkflow is the workflow of an order that names none.
const DefaultWorkflow = "order"

// Workflow is an ordered list of steps that succeed or fail as a whole.
type Workflow struct {
	Name  string
	Steps []StepDefinition
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

// CompensationDefinition says how a step is undone.
type CompensationDefinition struct {
	// Action names the compensating action the agent carries out.
	Action string
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
	// Compensation undoes the step.
	Compensation CompensationDefinition
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

// Validate reports every problem with the definition.
func (w *Workflow) Validate() error {
	var errs error
	if w.Name == "" {
		errs = errors.CombineErrors(errs, errors.New("workflow has no name"))
	}
	if len(w.Steps) == 0 {
		errs = errors.CombineErrors(errs, errors.Newf("workflow %q has no steps", w.Name))
	}
	seen := map[string]bool{}
	for i, s := range w.Steps {
		if s.Name == "" || seen[s.Name] {
			errs = errors.CombineErrors(errs, errors.Newf("workflow %q: step %d has an empty or repeated name %q", w.Name, i, s.Name))
		}
		seen[s.Name] = true
		if s.Agent == "" {
			errs = errors.CombineErrors(errs, errors.Newf("workflow %q: step %q names no agent", w.Name, s.Name))
		}
		if s.Budget <= 0 || s.MaxAttempts < 1 {
			errs = errors.CombineErrors(errs, errors.Newf("workflow %q: step %q needs a positive budget and at least one attempt", w.Name, s.Name))
		}
		if s.Compensation.Budget <= 0 || s.Compensation.MaxAttempts < 1 {
			errs = errors.CombineErrors(errs, errors.Newf("workflow %q: step %q: its compensation needs a positive budget and at least one attempt", w.Name, s.Name))
		}
		switch s.OnExhausted {
		case "", CompensateOnExhausted, ErrorOnExhausted, WaitOnExhausted:
		default:
			errs = errors.CombineErrors(errs, errors.Newf("workflow %q: step %q: onExhausted %q is not compensate, error or wait", w.Name, s.Name, s.OnExhausted))
		}
	}
	return errs
}

// Catalog holds the workflows an engine runs, by name.
type Catalog map[string]*Workflow

// NewCatalog validates the workflows and indexes them.
func NewCatalog(workflows ...*Workflow) (Catalog, error) {
	c := Catalog{}
	var errs error
	for _, w := range workflows {
		if err := w.Validate(); err != nil {
			errs = errors.CombineErrors(errs, err)
			continue
		}
		c[w.Name] = w
	}
	return c, errs
}

// Lookup returns the named workflow or ErrUnknownWorkflow.
func (c Catalog) Lookup(name string) (*Workflow, error) {
	if w, ok := c[name]; ok {
		return w, nil
	}
	return nil, errors.Wrapf(ErrUnknownWorkflow, "%q", name)
}

// Agents lists every agent the catalog's steps use, sorted.
func (c Catalog) Agents() []string {
	set := map[string]bool{}
	for _, w := range c {
		for _, s := range w.Steps {
			set[s.Agent] = true
		}
	}
	out := make([]string, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// DefaultBackoff starts at 200 ms and doubles up to 5 s, a fifth of it random.
var DefaultBackoff = Backoff{Initial: 200 * time.Millisecond, Multiplier: 2, Max: 5 * time.Second, Jitter: 0.2}

// OrderWorkflow is the demo workflow: reserve stock, take payment, book
// shipping, each undone by its compensation. Each attempt has 5 s, three
// attempts, and exhausted steps compensate the task.
func OrderWorkflow() *Workflow {
	step := func(name, agent, compensation string) StepDefinition {
		return StepDefinition{Name: name, Agent: agent, Budget: 5 * time.Second, MaxAttempts: 3, Backoff: DefaultBackoff,
			OnExhausted:  CompensateOnExhausted,
			Compensation: CompensationDefinition{Action: compensation, Budget: 5 * time.Second, MaxAttempts: 5, Backoff: DefaultBackoff}}
	}
	return &Workflow{Name: DefaultWorkflow, Steps: []StepDefinition{
		step("reserve-inventory", "inventory", "release-inventory"),
		step("charge-payment", "payment", "refund-payment"),
		step("schedule-shipping", "shipping", "cancel-shipping"),
	}}
}

// WithBudget returns a copy of w whose steps and compensations all have the
// given budget and backoff; tests and demos use it to make time pass quickly.
func (w *Workflow) WithBudget(budget time.Duration, backoff Backoff) *Workflow {
	c := *w
	c.Steps = append([]StepDefinition(nil), w.Steps...)
	for i := range c.Steps {
		c.Steps[i].Budget, c.Steps[i].Backoff = budget, backoff
		c.Steps[i].Compensation.Budget, c.Steps[i].Compensation.Backoff = budget, backoff
	}
	return &c
}
