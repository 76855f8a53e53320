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

// StepDefinition says how one step runs.
type StepDefinition struct {
	// Name is unique within the workflow and stable: it is stored in events.
	Name string
	// Agent names the agent that carries the step out; its commands go to
	// the topic CommandTopic(Agent).
	Agent string
	// Budget is how long an attempt may take: CompleteBy = dispatch + Budget.
	Budget time.Duration
	// MaxAttempts is how many attempts a transient failure may use.
	MaxAttempts int
	// Compensation names the action that undoes the step.
	Compensation string
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

// OrderWorkflow is the demo workflow: reserve stock, take payment, book
// shipping, each undone by its compensation.
func OrderWorkflow() *Workflow {
	return &Workflow{Name: DefaultWorkflow, Steps: []StepDefinition{
		{Name: "reserve-inventory", Agent: "inventory", Budget: 5 * time.Second, MaxAttempts: 3, Compensation: "release-inventory"},
		{Name: "charge-payment", Agent: "payment", Budget: 5 * time.Second, MaxAttempts: 3, Compensation: "refund-payment"},
		{Name: "schedule-shipping", Agent: "shipping", Budget: 5 * time.Second, MaxAttempts: 3, Compensation: "cancel-shipping"},
	}}
}
