package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// Problem is one thing wrong with a workflow definition. Path names the
// field the way a reader finds it in the file: steps[1].compensation.budget.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
	// Line is the line in the source file, when the reader knows it.
	Line int `json:"line,omitempty"`
}

func (p Problem) String() string {
	where := p.Path
	if p.Line > 0 {
		where = "line " + strconv.Itoa(p.Line) + ": " + where
	}
	if where == "" {
		return p.Message
	}
	return where + ": " + p.Message
}

// DefinitionError lists every problem of a workflow definition. It wraps
// ErrInvalidWorkflow.
type DefinitionError struct {
	// Source names the file or request the definition came from.
	Source   string
	Problems []Problem
}

func (e *DefinitionError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source + ": ")
	}
	fmt.Fprintf(&b, "%d problem(s) in workflow definition", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalidWorkflow) hold.
func (e *DefinitionError) Unwrap() error { return ErrInvalidWorkflow }

// ProblemsOf returns the problems listed by a DefinitionError in err.
func ProblemsOf(err error) []Problem {
	var de *DefinitionError
	if errors.As(err, &de) {
		return de.Problems
	}
	return nil
}

// Defaults of a step that does not set them.
const (
	DefaultStepBudget           = 10 * time.Second
	DefaultStepAttempts         = 3
	DefaultCompensationAttempts = 5
	// Deprecated: DefaultCompensationAttemps is the misspelt name of
	// DefaultCompensationAttempts, kept so that code using it compiles.
	DefaultCompensationAttemps = DefaultCompensationAttempts
)

var (
	namePattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$`)
	agentPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
)

// ParseDefinition reads a workflow definition in its JSON document form
// (docs/workflows.md; YAML files are converted to it first), fills in the
// defaults and validates it. Every problem found is reported at once in a
// *DefinitionError.
func ParseDefinition(data []byte) (*Workflow, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, &DefinitionError{Problems: []Problem{{Message: "not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}}}
	}
	p := &defParser{}
	w := p.workflow(doc)
	problems := p.problems
	// Check the meaning too, so that every problem is reported at once, but
	// say nothing more about a field whose form is already wrong.
	for _, sp := range ProblemsOf(w.Validate()) {
		reported := false
		for _, pp := range p.problems {
			reported = reported || pp.Path == sp.Path || strings.HasPrefix(sp.Path, pp.Path+".")
		}
		if !reported {
			problems = append(problems, sp)
		}
	}
	if len(problems) > 0 {
		return nil, &DefinitionError{Problems: problems}
	}
	return w, nil
}

type defParser struct{ problems []Problem }

func (p *defParser) add(path, format string, args ...any) {
	p.problems = append(p.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// object checks that v is an object with only the known fields.
func (p *defParser) object(path string, v any, known ...string) map[string]any {
	m, ok := v.(map[string]any)
	if !ok {
		p.add(path, "must be an object")
		return nil
	}
	var unknown []string
	for k := range m {
		found := false
		for _, f := range known {
			found = found || f == k
		}
		if !found {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		p.add(join(path, k), "unknown field (known: %s)", strings.Join(known, ", "))
	}
	return m
}

func (p *defParser) str(path string, v any) string {
	s, ok := v.(string)
	if !ok {
		p.add(path, "must be a string")
	}
	return s
}

func (p *defParser) boolean(path string, v any) bool {
	b, ok := v.(bool)
	if !ok {
		p.add(path, "must be true or false")
	}
	return b
}

func (p *defParser) integer(path string, v any) int {
	n, ok := v.(json.Number)
	if ok {
		if i, err := strconv.Atoi(string(n)); err == nil {
			return i
		}
	}
	p.add(path, "must be a whole number")
	return 0
}

func (p *defParser) number(path string, v any) float64 {
	if n, ok := v.(json.Number); ok {
		if f, err := n.Float64(); err == nil {
			return f
		}
	}
	p.add(path, "must be a number")
	return 0
}

func (p *defParser) duration(path string, v any) time.Duration {
	s, ok := v.(string)
	if !ok {
		p.add(path, "must be a duration such as \"500ms\" or \"5s\"")
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.add(path, "%q is not a duration such as \"500ms\" or \"5s\"", s)
	}
	return d
}

func (p *defParser) strings(path string, v any) []string {
	return parseList(p, path, v, "a list of strings", p.str)
}

func (p *defParser) ints(path string, v any) []int {
	return parseList(p, path, v, "a list of whole numbers", p.integer)
}

// parseList reads a list whose items item reads.
func parseList[T any](p *defParser, path string, v any, what string, item func(string, any) T) []T {
	list, ok := v.([]any)
	if !ok {
		p.add(path, "must be %s", what)
		return nil
	}
	out := make([]T, 0, len(list))
	for i, it := range list {
		out = append(out, item(fmt.Sprintf("%s[%d]", path, i), it))
	}
	return out
}

func (p *defParser) workflow(doc any) *Workflow {
	m := p.object("", doc, "name", "description", "trigger", "priority", "retention", "defaults", "steps")
	w := &Workflow{}
	if m == nil {
		return w
	}
	if v, ok := m["name"]; ok {
		w.Name = p.str("name", v)
	}
	if v, ok := m["description"]; ok {
		w.Description = p.str("description", v)
	}
	if v, ok := m["trigger"]; ok {
		w.Trigger = p.trigger("trigger", v)
	}
	if v, ok := m["priority"]; ok {
		w.Priority = Priority(p.str("priority", v))
	}
	if v, ok := m["retention"]; ok {
		w.Retention = p.retention("retention", v)
	}
	defaults := documentedDefaults()
	if v, ok := m["defaults"]; ok {
		if dm := p.object("defaults", v, "budget", "attempts", "backoff", "onExhausted"); dm != nil {
			p.stepTiming("defaults", dm, &defaults.budget, &defaults.attempts, &defaults.backoff)
			if v, ok := dm["onExhausted"]; ok {
				defaults.onExhausted = ExhaustedPolicy(p.str("defaults.onExhausted", v))
			}
		}
	}
	steps, ok := m["steps"].([]any)
	if !ok {
		if _, present := m["steps"]; present {
			p.add("steps", "must be a list of steps")
		}
		return w
	}
	for i, v := range steps {
		w.Steps = append(w.Steps, p.step(fmt.Sprintf("steps[%d]", i), v, defaults))
	}
	return w
}

func (p *defParser) trigger(path string, v any) Trigger {
	var t Trigger
	m := p.object(path, v, "topics", "type", "typeField", "idField", "replyToField", "priorityField")
	if m == nil {
		return t
	}
	if v, ok := m["topics"]; ok {
		t.Topics = p.strings(join(path, "topics"), v)
	}
	for field, into := range map[string]*string{"type": &t.Type, "typeField": &t.TypeField, "idField": &t.IDField, "replyToField": &t.ReplyToField,
		"priorityField": &t.PriorityField} {
		if v, ok := m[field]; ok {
			*into = p.str(join(path, field), v)
		}
	}
	return t
}

func (p *defParser) stepTiming(path string, m map[string]any, budget *time.Duration, attempts *int, backoff *Backoff) {
	if v, ok := m["budget"]; ok {
		*budget = p.duration(join(path, "budget"), v)
	}
	if v, ok := m["attempts"]; ok {
		*attempts = p.integer(join(path, "attempts"), v)
	}
	if v, ok := m["backoff"]; ok {
		*backoff = p.backoff(join(path, "backoff"), v, *backoff)
	}
}

func (p *defParser) backoff(path string, v any, b Backoff) Backoff {
	m := p.object(path, v, "initial", "multiplier", "max", "jitter")
	if m == nil {
		return b
	}
	if v, ok := m["initial"]; ok {
		b.Initial = p.duration(join(path, "initial"), v)
	}
	if v, ok := m["max"]; ok {
		b.Max = p.duration(join(path, "max"), v)
	}
	if v, ok := m["multiplier"]; ok {
		b.Multiplier = p.number(join(path, "multiplier"), v)
	}
	if v, ok := m["jitter"]; ok {
		b.Jitter = p.number(join(path, "jitter"), v)
	}
	return b
}

func (p *defParser) step(path string, v any, d stepDefaults) StepDefinition {
	s := d.step()
	m := p.object(path, v, "name", "agent", "http", "budget", "attempts", "backoff", "onExhausted", "compensation", "after", "when", "await", "delay")
	if m == nil {
		return s
	}
	p.graphFields(path, m, &s)
	if v, ok := m["name"]; ok {
		s.Name = p.str(join(path, "name"), v)
	}
	if v, ok := m["agent"]; ok {
		s.Agent = p.str(join(path, "agent"), v)
	}
	if v, ok := m["http"]; ok {
		s.HTTP = p.http(join(path, "http"), v)
		if s.Agent == "" {
			s.Agent = HTTPAgent
		}
	}
	if v, ok := m["delay"]; ok {
		s.Delay = p.delayDefinition(join(path, "delay"), v)
	}
	p.stepTiming(path, m, &s.Budget, &s.MaxAttempts, &s.Backoff)
	p.awaitField(path, m, &s)
	if v, ok := m["onExhausted"]; ok {
		s.OnExhausted = ExhaustedPolicy(p.str(join(path, "onExhausted"), v))
	}
	if v, ok := m["compensation"]; ok && v != nil {
		s.Compensation = p.compensation(join(path, "compensation"), v, s)
	}
	return s
}

func (p *defParser) compensation(path string, v any, s StepDefinition) *CompensationDefinition {
	comp := compensationOf(s)
	c := &comp
	if action, ok := v.(string); ok {
		c.Action = action
		return c
	}
	m := p.object(path, v, "action", "http", "budget", "attempts", "backoff")
	if m == nil {
		return c
	}
	if v, ok := m["action"]; ok {
		c.Action = p.str(join(path, "action"), v)
	}
	if v, ok := m["http"]; ok {
		c.HTTP = p.http(join(path, "http"), v)
	}
	p.stepTiming(path, m, &c.Budget, &c.MaxAttempts, &c.Backoff)
	if c.Action == "" {
		c.Action = defaultAction(s.Name)
	}
	return c
}

func (p *defParser) http(path string, v any) *HTTPCall {
	h := &HTTPCall{Method: "POST"}
	m := p.object(path, v, "method", "url", "headers", "body", "transientStatus", "permanentStatus", "followRedirects")
	if m == nil {
		return h
	}
	if v, ok := m["method"]; ok {
		h.Method = strings.ToUpper(p.str(join(path, "method"), v))
	}
	if v, ok := m["url"]; ok {
		h.URL = p.str(join(path, "url"), v)
	}
	if v, ok := m["headers"]; ok {
		if hm, ok := v.(map[string]any); ok {
			h.Headers = map[string]string{}
			for k, hv := range hm {
				h.Headers[k] = p.str(join(path, "headers."+k), hv)
			}
		} else {
			p.add(join(path, "headers"), "must be an object of header names to values")
		}
	}
	if v, ok := m["body"]; ok && v != nil {
		body, err := json.Marshal(v)
		if err != nil {
			p.add(join(path, "body"), "cannot be encoded as JSON: %v", err)
		}
		h.Body = body
	}
	if v, ok := m["transientStatus"]; ok {
		h.TransientStatus = p.ints(join(path, "transientStatus"), v)
	}
	if v, ok := m["permanentStatus"]; ok {
		h.PermanentStatus = p.ints(join(path, "permanentStatus"), v)
	}
	if v, ok := m["followRedirects"]; ok {
		h.FollowRedirects = p.boolean(join(path, "followRedirects"), v)
	}
	return h
}

// Validate reports every problem with the definition in a
// *DefinitionError, or nil. ParseDefinition calls it; a workflow built in Go
// must pass it before it is registered.
func (w *Workflow) Validate() error {
	var problems []Problem
	add := func(path, format string, args ...any) {
		problems = append(problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	switch {
	case w.Name == "":
		add("name", "is required")
	case !namePattern.MatchString(w.Name):
		add("name", "%q must be 1 to 100 letters, digits, _ or - and start with a letter or digit", truncate(w.Name))
	}
	validateTrigger(w.Trigger, add)
	validateRetention(w.Retention, add)
	if _, err := ParsePriority(string(w.Priority)); err != nil {
		add("priority", "%q is not high, normal or low", truncate(string(w.Priority)))
	}
	if len(w.Steps) == 0 {
		add("steps", "a workflow needs at least one step")
	}
	if len(w.Steps) > MaxSteps {
		add("steps", "%d steps is over the limit of %d", len(w.Steps), MaxSteps)
	}
	seen := map[string]int{}
	for i, s := range w.Steps {
		path := fmt.Sprintf("steps[%d]", i)
		switch first, dup := seen[s.Name]; {
		case s.Name == "":
			add(path+".name", "is required")
		case !namePattern.MatchString(s.Name):
			add(path+".name", "%q must be 1 to 100 letters, digits, _ or - and start with a letter or digit", truncate(s.Name))
		case dup:
			add(path+".name", "step %q is already defined by steps[%d]", s.Name, first)
		default:
			seen[s.Name] = i
		}
		switch {
		case s.Delay != nil:
			validateDelay(path, s, templateScope{workflow: w, before: i}, add)
		case s.Agent == "" && s.Await != nil:
			validateAwait(w, i, add)
		case s.Agent == "":
			add(path+".agent", "is required: name the agent that runs the step, or give an http call")
		case !agentPattern.MatchString(s.Agent):
			add(path+".agent", "%q must be 1 to 100 letters, digits, ., _ or - and start with a letter or digit", truncate(s.Agent))
		case bandSuffix(s.Agent):
			add(path+".agent", "%q ends in .high or .low, which name the priority bands of an agent's commands", truncate(s.Agent))
		case s.Await != nil:
			validateAwait(w, i, add)
		}
		if s.Await != nil && s.Delay != nil {
			add(path+".await", "a step is an agent call, an await or a delay: give await or delay, not both")
		}
		validateTiming(path, s.Budget, s.MaxAttempts, s.Backoff, add)
		switch s.OnExhausted {
		case "", CompensateOnExhausted, ErrorOnExhausted, WaitOnExhausted:
		default:
			add(path+".onExhausted", "%q is not compensate, error or wait", s.OnExhausted)
		}
		scope := templateScope{workflow: w, before: i}
		if s.HTTP != nil {
			validateHTTP(path+".http", s.HTTP, scope, add)
		}
		if c := s.Compensation; c != nil {
			cpath := path + ".compensation"
			if c.Action == "" && c.HTTP == nil {
				add(cpath+".action", "is required")
			}
			validateTiming(cpath, c.Budget, c.MaxAttempts, c.Backoff, add)
			if c.HTTP != nil {
				if s.HTTP == nil && s.Agent != HTTPAgent {
					add(cpath+".http", "a compensation runs on the step's agent %q; give the step an http call too, or leave the compensation to that agent", s.Agent)
				}
				validateHTTP(cpath+".http", c.HTTP, templateScope{workflow: w, before: i, compensation: true}, add)
			}
		}
	}
	validateGraph(w, add)
	validateConditions(w, add)
	if len(problems) > 0 {
		return &DefinitionError{Problems: problems}
	}
	return nil
}

func validateTrigger(t Trigger, add func(string, string, ...any)) {
	for i, topic := range t.Topics {
		switch {
		case !topicPattern.MatchString(topic):
			add(fmt.Sprintf("trigger.topics[%d]", i), "%q is not a valid topic name", truncate(topic))
		case ReservedTopic(topic) && topic != DefaultTriggerTopic, strings.HasPrefix(topic, "saga.reply.") || strings.HasPrefix(topic, "reply."):
			add(fmt.Sprintf("trigger.topics[%d]", i), "%q is one of saga's own topics or a reply topic; a workflow starts on the application's topics", topic)
		}
	}
	for field, value := range map[string]string{"typeField": t.TypeField, "replyToField": t.ReplyToField, "priorityField": t.PriorityField} {
		if value != "" && !validPointer(value) {
			add("trigger."+field, "%q is not a JSON pointer such as /order/id", truncate(value))
		}
	}
	if t.IDField != "" && t.IDField != KeyIDField && !validPointer(t.IDField) {
		add("trigger.idField", "%q is neither \"key\" nor a JSON pointer such as /order/id", truncate(t.IDField))
	}
	if t.TypeField != "" && t.Type == "" {
		add("trigger.type", "is required when typeField is given")
	}
}

func validateTiming(path string, budget time.Duration, attempts int, b Backoff, add func(string, string, ...any)) {
	if budget <= 0 {
		add(path+".budget", "must be positive, not %s", budget)
	}
	if attempts < 1 {
		add(path+".attempts", "must be at least 1, not %d", attempts)
	}
	if b.Initial < 0 || b.Max < 0 {
		add(path+".backoff", "durations must not be negative")
	}
	if b.Multiplier < 1 && b != (Backoff{}) { // the zero Backoff takes the default (WithDefaults)
		add(path+".backoff.multiplier", "must be at least 1, not %g", b.Multiplier)
	}
	if b.Jitter < 0 || b.Jitter > 1 {
		add(path+".backoff.jitter", "must be from 0 to 1, not %g", b.Jitter)
	}
}

func validateHTTP(path string, h *HTTPCall, scope templateScope, add func(string, string, ...any)) {
	switch h.Method {
	case "GET", "POST", "PUT", "PATCH", "DELETE":
	default:
		add(path+".method", "%q is not GET, POST, PUT, PATCH or DELETE", truncate(h.Method))
	}
	if h.URL == "" {
		add(path+".url", "is required")
	} else if !literalOrigin(h.URL) {
		add(path+".url", "%q must start with http:// or https:// and a host written out: placeholders may follow the host, never choose it, so that an order cannot send the agent elsewhere", truncate(h.URL))
	}
	placeholders := 0
	check := func(field, text string) {
		n, err := scope.check(text)
		placeholders += n
		if err != nil {
			add(path+"."+field, "%v", err)
		}
	}
	check("url", h.URL)
	// Secrets may go in header values and the body, never in the url.
	scope.secrets = true
	names := make([]string, 0, len(h.Headers))
	for k := range h.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		check("headers."+k, h.Headers[k])
	}
	if len(h.Body) > 0 {
		var body any
		if err := json.Unmarshal(h.Body, &body); err != nil {
			add(path+".body", "is not valid JSON: %v", err)
		} else {
			walkStrings(body, func(s string) { check("body", s) })
		}
	}
	if placeholders > MaxTemplatePlaceholders {
		// Each could stand for a whole order: rendering is bounded anyway,
		// but a call that can only fail at run time is refused now.
		add(path, "has %d placeholders in its url, headers and body, over the limit of %d", placeholders, MaxTemplatePlaceholders)
	}
	if size := len(h.URL) + len(h.Body) + headersSize(h.Headers); size > DefaultMaxRenderedBytes {
		add(path, "is %d bytes before any placeholder is filled in, over the %d bytes a call may render to", size, DefaultMaxRenderedBytes)
	}
	for _, codes := range [][]int{h.TransientStatus, h.PermanentStatus} {
		for _, c := range codes {
			if c < 100 || c > 599 {
				add(path, "status code %d is not from 100 to 599", c)
			}
		}
	}
}

// MarshalDefinition encodes the workflow as its JSON document, every
// default spelled out, so that two equal definitions encode alike.
func (w *Workflow) MarshalDefinition() ([]byte, error) {
	doc := map[string]any{"name": w.Name}
	if w.Description != "" {
		doc["description"] = w.Description
	}
	trigger := map[string]any{}
	if len(w.Trigger.Topics) > 0 {
		trigger["topics"] = w.Trigger.Topics
	}
	for field, value := range map[string]string{"type": w.Trigger.Type, "typeField": w.Trigger.TypeField, "idField": w.Trigger.IDField, "replyToField": w.Trigger.ReplyToField,
		"priorityField": w.Trigger.PriorityField} {
		if value != "" {
			trigger[field] = value
		}
	}
	if len(trigger) > 0 {
		doc["trigger"] = trigger
	}
	if p := w.Priority.recorded(); p != "" {
		// Normal is left out, so that a definition that names it is equal
		// to one written before priorities.
		doc["priority"] = string(p)
	}
	retentionDoc(doc, w.Retention)
	steps := make([]any, 0, len(w.Steps))
	for _, s := range w.Steps {
		step := map[string]any{"name": s.Name, "agent": s.Agent, "budget": s.Budget.String(), "attempts": s.MaxAttempts,
			"backoff": backoffDoc(s.Backoff)}
		if s.OnExhausted != "" {
			step["onExhausted"] = string(s.OnExhausted)
		}
		if s.HTTP != nil {
			step["http"] = s.HTTP
		}
		graphDoc(step, s)
		awaitDoc(step, s)
		delayDoc(step, s)
		if c := s.Compensation; c != nil {
			comp := map[string]any{"budget": c.Budget.String(), "attempts": c.MaxAttempts, "backoff": backoffDoc(c.Backoff)}
			if c.Action != "" {
				comp["action"] = c.Action
			}
			if c.HTTP != nil {
				comp["http"] = c.HTTP
			}
			step["compensation"] = comp
		}
		steps = append(steps, step)
	}
	doc["steps"] = steps
	out, err := json.Marshal(doc)
	return out, errors.Wrapf(err, "encode workflow %s", w.Name)
}

func backoffDoc(b Backoff) map[string]any {
	return map[string]any{"initial": b.Initial.String(), "multiplier": b.Multiplier, "max": b.Max.String(), "jitter": b.Jitter}
}

// Equal reports whether two definitions are the same, ignoring versions.
func (w *Workflow) Equal(other *Workflow) bool {
	a, errA := w.MarshalDefinition()
	b, errB := other.MarshalDefinition()
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// literalOrigin reports whether a URL template's scheme and host are
// written out, with no placeholder before the path.
func literalOrigin(url string) bool {
	rest, ok := strings.CutPrefix(url, "https://")
	if !ok {
		if rest, ok = strings.CutPrefix(url, "http://"); !ok {
			return false
		}
	}
	host, _, _ := strings.Cut(rest, "/")
	host, _, _ = strings.Cut(host, "?")
	return host != "" && !strings.Contains(host, "{{") && !strings.Contains(host, "@")
}

// validPointer reports whether s is a JSON pointer (RFC 6901) to a member.
func validPointer(s string) bool {
	return len(s) > 1 && s[0] == '/' && !strings.Contains(s, "//")
}

// headersSize is the length of an HTTP call's header names and templates.
func headersSize(headers map[string]string) int {
	n := 0
	for k, v := range headers {
		n += len(k) + len(v)
	}
	return n
}
