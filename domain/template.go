package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
)

// ErrTemplate is returned when a template cannot be rendered: it refers to
// a value the task does not have.
var ErrTemplate = errors.New("template cannot be rendered")

// Templates are strings with placeholders {{ path }}. A path starts with
// one of these roots and continues with object members or list indexes,
// separated by dots: order.customer.email, results.charge-payment.paymentId,
// order.items.0.sku.
const (
	// TemplateOrder is the order (the message that started the task).
	TemplateOrder = "order"
	// TemplateResults are the results of the steps that succeeded before,
	// by step name.
	TemplateResults = "results"
	// TemplateResult is, in a compensation, the result of the step it
	// undoes.
	TemplateResult = "result"
	// TemplateTask has id, workflow and version.
	TemplateTask = "task"
	// TemplateStep, TemplateAttempt and TemplateIdempotencyKey describe the
	// command.
	TemplateStep           = "step"
	TemplateAttempt        = "attempt"
	TemplateIdempotencyKey = "idempotencyKey"
	// TemplateSecret is secret.NAME: a secret the agent resolves when it
	// makes the call, from its own process (files or environment), so that
	// definitions, commands and events hold only the placeholder. Secrets
	// may go in header values and bodies, never in URLs, which errors and
	// traces name.
	TemplateSecret = "secret"
)

// secretNamePattern is the syntax of a secret's name: it is also a file
// name and the end of an environment variable's (SAGA_SECRET_NAME).
var secretNamePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,63}$`)

// ValidSecretName reports whether name may name a secret: 1 to 64
// letters, digits or _, starting with a letter.
func ValidSecretName(name string) bool { return secretNamePattern.MatchString(name) }

// TemplateData is what templates are rendered over (an HTTP step's URL
// and body, from the command that runs it: protocol.ExecuteStep.TemplateData).
type TemplateData struct {
	TaskID, Workflow string
	Version          int
	Step             string
	Attempt          int
	IdempotencyKey   string
	Order            json.RawMessage
	Results          map[string]json.RawMessage
	Result           json.RawMessage
	// Secret resolves {{secret.NAME}}: set only where the call is made
	// (the agent); nil refuses secrets.
	Secret func(name string) (string, error)
}

// placeholder is one {{ path }} in a template.
type placeholder struct {
	start, end int // byte range of the whole placeholder
	path       []string
}

// parseTemplate finds the placeholders of text.
func parseTemplate(text string) ([]placeholder, error) {
	var out []placeholder
	for i := 0; i < len(text); {
		open := strings.Index(text[i:], "{{")
		if open < 0 {
			break
		}
		open += i
		closing := strings.Index(text[open+2:], "}}")
		if closing < 0 {
			return nil, errors.Newf("template %q: {{ at %d is not closed by }}", truncate(text), open)
		}
		closing += open + 2
		expr := strings.TrimSpace(text[open+2 : closing])
		if expr == "" || strings.ContainsAny(expr, " \t\n{}") {
			return nil, errors.Newf("template %q: {{%s}} is not a path such as order.id", truncate(text), text[open+2:closing])
		}
		path := strings.Split(expr, ".")
		if slices.Contains(path, "") {
			return nil, errors.Newf("template %q: {{%s}} has an empty path segment", truncate(text), expr)
		}
		out = append(out, placeholder{start: open, end: closing + 2, path: path})
		i = closing + 2
	}
	return out, nil
}

// templateScope says what a template in a definition may refer to: the
// results of the steps before index before, and result in compensations.
type templateScope struct {
	workflow     *Workflow
	before       int
	compensation bool
	// secrets says the template may name secrets (header values, bodies).
	secrets bool
}

func (sc templateScope) check(text string) error {
	phs, err := parseTemplate(text)
	if err != nil {
		return err
	}
	for _, ph := range phs {
		if err := sc.checkPath(ph.path); err != nil {
			return errors.Newf("{{%s}}: %v", strings.Join(ph.path, "."), err)
		}
	}
	return nil
}

func (sc templateScope) checkPath(path []string) error {
	switch path[0] {
	case TemplateOrder:
		return nil
	case TemplateResults:
		if len(path) < 2 {
			return errors.New("name a step: results.STEP")
		}
		for i := 0; i < sc.before && i < len(sc.workflow.Steps); i++ {
			if sc.workflow.Steps[i].Name == path[1] {
				return nil
			}
		}
		return errors.Newf("no step %q runs before this one", path[1])
	case TemplateResult:
		if !sc.compensation {
			return errors.New("result is only known in a compensation (use results.STEP)")
		}
		return nil
	case TemplateTask:
		if len(path) != 2 || (path[1] != "id" && path[1] != "workflow" && path[1] != "version") {
			return errors.New("task has id, workflow and version")
		}
		return nil
	case TemplateStep, TemplateAttempt, TemplateIdempotencyKey:
		if len(path) != 1 {
			return errors.Newf("%s has no members", path[0])
		}
		return nil
	case TemplateSecret:
		switch {
		case !sc.secrets:
			return errors.New("secrets may go in header values and the body, never in the url, which errors and traces name")
		case len(path) != 2:
			return errors.New("name one secret: secret.NAME")
		case !ValidSecretName(path[1]):
			return errors.Newf("secret name %q must be 1 to 64 letters, digits or _ and start with a letter", truncate(path[1]))
		}
		return nil
	}
	return errors.Newf("unknown root %q: use order, results, result, task, step, attempt, idempotencyKey or secret", path[0])
}

// lookup returns the JSON value a path refers to.
func (d TemplateData) lookup(path []string) (any, error) {
	var root json.RawMessage
	rest := path[1:]
	switch path[0] {
	case TemplateOrder:
		root = d.Order
	case TemplateResults:
		if len(path) < 2 {
			return nil, errors.New("name a step")
		}
		r, ok := d.Results[path[1]]
		if !ok {
			return nil, errors.Newf("step %s has no result", path[1])
		}
		root, rest = r, path[2:]
	case TemplateResult:
		root = d.Result
	case TemplateTask:
		switch strings.Join(rest, ".") {
		case "id":
			return d.TaskID, nil
		case "workflow":
			return d.Workflow, nil
		case "version":
			return json.Number(strconv.Itoa(d.Version)), nil
		}
		return nil, errors.New("task has id, workflow and version")
	case TemplateStep:
		return d.Step, nil
	case TemplateAttempt:
		return json.Number(strconv.Itoa(d.Attempt)), nil
	case TemplateIdempotencyKey:
		return d.IdempotencyKey, nil
	case TemplateSecret:
		if len(path) != 2 || !ValidSecretName(path[1]) {
			return nil, errors.New("name one secret: secret.NAME")
		}
		if d.Secret == nil {
			return nil, errors.Newf("secret %s cannot be resolved here", path[1])
		}
		v, err := d.Secret(path[1])
		if err != nil {
			return nil, err
		}
		return v, nil
	default:
		return nil, errors.Newf("unknown root %q", path[0])
	}
	if len(root) == 0 {
		return nil, errors.Newf("%s is empty", path[0])
	}
	dec := json.NewDecoder(bytes.NewReader(root))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errors.Newf("%s is not JSON", path[0])
	}
	for _, seg := range rest {
		switch node := v.(type) {
		case map[string]any:
			next, ok := node[seg]
			if !ok {
				return nil, errors.Newf("no member %q", seg)
			}
			v = next
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(node) {
				return nil, errors.Newf("no index %q in a list of %d", seg, len(node))
			}
			v = node[i]
		default:
			return nil, errors.Newf("cannot take %q of a %T", seg, v)
		}
	}
	return v, nil
}

// text renders a JSON value into a string template: strings as they are,
// anything else as JSON.
func text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case json.Number:
		return string(v)
	case nil:
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// RenderText renders a string template; escape, when given, escapes each
// substituted value (for URLs).
func RenderText(tmpl string, data TemplateData, escape func(string) string) (string, error) {
	phs, err := parseTemplate(tmpl)
	if err != nil {
		return "", errors.Mark(err, ErrTemplate)
	}
	if len(phs) == 0 {
		return tmpl, nil
	}
	var b strings.Builder
	last := 0
	for _, ph := range phs {
		v, err := data.lookup(ph.path)
		if err != nil {
			return "", errors.Wrapf(ErrTemplate, "{{%s}}: %v", strings.Join(ph.path, "."), err)
		}
		s := text(v)
		if escape != nil {
			s = escape(s)
		}
		b.WriteString(tmpl[last:ph.start])
		b.WriteString(s)
		last = ph.end
	}
	b.WriteString(tmpl[last:])
	return b.String(), nil
}

// RenderJSON renders a JSON body template: every string in it is a text
// template, and a string that is exactly one placeholder becomes the JSON
// value it refers to (an object, a number, ...).
func RenderJSON(body json.RawMessage, data TemplateData) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, errors.Wrapf(ErrTemplate, "body is not JSON: %v", err)
	}
	var walkErr error
	var render func(v any) any
	render = func(v any) any {
		switch node := v.(type) {
		case map[string]any:
			for k, item := range node {
				node[k] = render(item)
			}
		case []any:
			for i, item := range node {
				node[i] = render(item)
			}
		case string:
			phs, err := parseTemplate(node)
			if err != nil {
				walkErr = errors.Mark(err, ErrTemplate)
				return node
			}
			if len(phs) == 1 && phs[0].start == 0 && phs[0].end == len(node) {
				value, err := data.lookup(phs[0].path)
				if err != nil {
					walkErr = errors.Wrapf(ErrTemplate, "{{%s}}: %v", strings.Join(phs[0].path, "."), err)
				}
				return value
			}
			s, err := RenderText(node, data, nil)
			if err != nil {
				walkErr = err
			}
			return s
		}
		return v
	}
	tree = render(tree)
	if walkErr != nil {
		return nil, walkErr
	}
	out, err := json.Marshal(tree)
	return out, errors.Wrap(err, "encode rendered body")
}

// walkStrings calls f for every string in a decoded JSON value.
func walkStrings(v any, f func(string)) {
	switch node := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(node))
		for k := range node {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			walkStrings(node[k], f)
		}
	case []any:
		for _, item := range node {
			walkStrings(item, f)
		}
	case string:
		f(node)
	}
}

// EscapeURLValue escapes a value substituted into a URL: everything but
// letters, digits and -._~ is percent-encoded, so a value cannot add a path
// segment or a query parameter.
func EscapeURLValue(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
