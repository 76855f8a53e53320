package domain

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Predecessors names the steps the step at index i waits for: its After,
// or, when After is nil, the step before it in the list (none for the
// first), so that a definition without After runs its steps one after
// another.
func (w *Workflow) Predecessors(i int) []string {
	if i < 0 || i >= len(w.Steps) {
		return nil
	}
	if after := w.Steps[i].After; after != nil {
		return after
	}
	if i == 0 {
		return nil
	}
	return []string{w.Steps[i-1].Name}
}

// stepIndex returns the index of the named step, -1 if there is none.
func (w *Workflow) stepIndex(name string) int {
	for i := range w.Steps {
		if w.Steps[i].Name == name {
			return i
		}
	}
	return -1
}

// Ancestors returns the steps that always run before the step at index i:
// its predecessors, theirs, and so on. It is safe on a definition with a
// cycle (Validate refuses one).
func (w *Workflow) Ancestors(i int) map[string]bool {
	out := map[string]bool{}
	stack := slices.Clone(w.Predecessors(i))
	for len(stack) > 0 {
		name := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if out[name] {
			continue
		}
		out[name] = true
		if j := w.stepIndex(name); j >= 0 {
			stack = append(stack, w.Predecessors(j)...)
		}
	}
	return out
}

// validateGraph checks the steps' After lists: every name is a step of the
// workflow, named once, not the step itself, and the steps and their
// predecessors form no cycle.
func validateGraph(w *Workflow, add func(string, string, ...any)) {
	bad := false
	for i, s := range w.Steps {
		seen := map[string]bool{}
		for j, name := range s.After {
			path := fmt.Sprintf("steps[%d].after[%d]", i, j)
			switch {
			case name == s.Name:
				add(path, "step %q cannot wait for itself", truncate(name))
				bad = true
			case seen[name]:
				add(path, "step %q is named twice", truncate(name))
			case w.stepIndex(name) < 0:
				add(path, "no step %q in this workflow", truncate(name))
				bad = true
			}
			seen[name] = true
		}
	}
	if bad {
		return
	}
	if cycle := w.cycle(); cycle != nil {
		i := w.stepIndex(cycle[0])
		add(fmt.Sprintf("steps[%d].after", i), "steps wait for each other in a cycle: %s", strings.Join(cycle, " → "))
	}
}

// cycle returns the names of a cycle of steps waiting for each other,
// the first repeated at the end, or nil when there is none.
func (w *Workflow) cycle() []string {
	const (
		unvisited = iota
		onPath
		done
	)
	mark := make([]int, len(w.Steps))
	var path []string
	var visit func(i int) []string
	visit = func(i int) []string {
		mark[i] = onPath
		path = append(path, w.Steps[i].Name)
		for _, name := range w.Predecessors(i) {
			j := w.stepIndex(name)
			switch {
			case j < 0:
			case mark[j] == onPath:
				start := slices.Index(path, name)
				cycle := slices.Clone(path[start:])
				slices.Reverse(cycle)
				return append([]string{name}, cycle...)
			case mark[j] == unvisited:
				if c := visit(j); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		mark[i] = done
		return nil
	}
	for i := range w.Steps {
		if mark[i] == unvisited {
			if c := visit(i); c != nil {
				return c
			}
		}
	}
	return nil
}

// ready reports whether every step the step at index i waits for has
// succeeded or was skipped.
func (t *Task) ready(wf *Workflow, i int) bool {
	if wf.Steps[i].After == nil {
		// The step before it, without making a list of it.
		return i == 0 || t.stepDone(wf.Steps[i-1].Name)
	}
	for _, name := range wf.Steps[i].After {
		if !t.stepDone(name) {
			return false
		}
	}
	return true
}

// stepDone reports whether the named step succeeded or was skipped.
func (t *Task) stepDone(name string) bool {
	p := t.Step(name)
	return p != nil && p.done()
}

// ResultsFor returns the results of the steps that always run before the
// named one (its ancestors in the workflow's graph), by step name: what a
// command and a condition of that step may read.
func (t *Task) ResultsFor(wf *Workflow, step string) map[string]json.RawMessage {
	i := wf.stepIndex(step)
	if i < 0 {
		return nil
	}
	var out map[string]json.RawMessage
	for name := range wf.Ancestors(i) {
		if s := t.Step(name); s != nil && len(s.Result) > 0 {
			if out == nil {
				out = map[string]json.RawMessage{}
			}
			out[name] = s.Result
		}
	}
	return out
}

// runsBefore reports whether the named step always runs before the step
// whose template sc checks: it is one of the step's ancestors or, in a
// compensation, the step itself.
func (sc templateScope) runsBefore(name string) bool {
	if sc.before < 0 || sc.before >= len(sc.workflow.Steps) {
		return false
	}
	if sc.compensation && sc.workflow.Steps[sc.before].Name == name {
		return true
	}
	return sc.workflow.Ancestors(sc.before)[name]
}

// graphFields reads a step's after and when.
func (p *defParser) graphFields(path string, m map[string]any, s *StepDefinition) {
	if v, ok := m["after"]; ok {
		s.After = p.strings(join(path, "after"), v)
	}
	if v, ok := m["when"]; ok {
		s.When = p.str(join(path, "when"), v)
	}
}

// graphDoc adds a step's after and when to its JSON document, when set, so
// that a definition without them encodes as it did before they existed.
func graphDoc(doc map[string]any, s StepDefinition) {
	if s.After != nil {
		doc["after"] = s.After
	}
	if s.When != "" {
		doc["when"] = s.When
	}
}
