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

// ErrRenderTooLarge is returned, an ErrTemplate too, when rendering a
// step's templates would exceed the rendering's byte bound: the request
// would be larger than the agent allows, which retrying cannot change.
var ErrRenderTooLarge = errors.Wrap(ErrTemplate, "rendered templates exceed their size limit")

// DefaultMaxRenderedBytes bounds what the templates of one step's call
// render to (URL, headers and body together) when no other bound is given:
// room for a whole order of the largest default size, twice over.
const DefaultMaxRenderedBytes = 2 << 20

// MaxTemplatePlaceholders bounds the placeholders of one HTTP call in a
// definition (URL, headers and body together). With the bound on the
// rendered size it bounds the work and memory a step's rendering takes; a
// definition with more is refused at registration.
const MaxTemplatePlaceholders = 256

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
	for i := 0; ; {
		ph, found, err := nextPlaceholder(text, i)
		if err != nil || !found {
			return out, err
		}
		out = append(out, ph)
		i = ph.end
	}
}

// nextPlaceholder finds the first placeholder of text at or after byte i;
// found is false when there is none. Rendering walks the placeholders with
// it one at a time, so that a template of many placeholders costs nothing
// beyond the part rendered before the size bound stops it.
func nextPlaceholder(text string, i int) (ph placeholder, found bool, err error) {
	open := strings.Index(text[i:], "{{")
	if open < 0 {
		return ph, false, nil
	}
	open += i
	closing := strings.Index(text[open+2:], "}}")
	if closing < 0 {
		return ph, false, errors.Newf("template %q: {{ at %d is not closed by }}", truncate(text), open)
	}
	closing += open + 2
	expr := strings.TrimSpace(text[open+2 : closing])
	if expr == "" || strings.ContainsAny(expr, " \t\n{}") {
		return ph, false, errors.Newf("template %q: {{%s}} is not a path such as order.id", truncate(text), text[open+2:closing])
	}
	path := strings.Split(expr, ".")
	if slices.Contains(path, "") {
		return ph, false, errors.Newf("template %q: {{%s}} has an empty path segment", truncate(text), expr)
	}
	return placeholder{start: open, end: closing + 2, path: path}, true, nil
}

// templateScope says what a template in a definition may refer to: the
// results of the steps that always run before the step at index before
// (runsBefore), and result in compensations.
type templateScope struct {
	workflow     *Workflow
	before       int
	compensation bool
	// secrets says the template may name secrets (header values, bodies).
	secrets bool
}

// check checks the placeholders of text and returns how many it has.
func (sc templateScope) check(text string) (int, error) {
	phs, err := parseTemplate(text)
	if err != nil {
		return 0, err
	}
	for _, ph := range phs {
		if err := sc.checkPath(ph.path); err != nil {
			return len(phs), errors.Newf("{{%s}}: %v", strings.Join(ph.path, "."), err)
		}
	}
	return len(phs), nil
}

func (sc templateScope) checkPath(path []string) error {
	switch path[0] {
	case TemplateOrder:
		return nil
	case TemplateResults:
		if len(path) < 2 {
			return errors.New("name a step: results.STEP")
		}
		if sc.runsBefore(path[1]) {
			return nil
		}
		return errors.Newf("no step %q always runs before this one (name it in after, or in the after of a step this one waits for)", path[1])
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

// Renderer renders the templates of one step's call over its data: each
// JSON value (the order, a result) is decoded once, however many
// placeholders refer to it, and everything rendered, URL, headers and body
// together, counts against one byte bound. A Renderer is not safe for
// concurrent use.
type Renderer struct {
	data     TemplateData
	maxBytes int
	used     int
	decoded  map[rootKey]decodedRoot
}

// rootKey names a JSON value placeholders start from: order, result, or
// results and a step.
type rootKey struct{ root, step string }

type decodedRoot struct {
	value any
	err   error
}

// NewRenderer returns a Renderer over data whose renderings together may
// be at most maxBytes long (DefaultMaxRenderedBytes if maxBytes <= 0).
func NewRenderer(data TemplateData, maxBytes int) *Renderer {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxRenderedBytes
	}
	return &Renderer{data: data, maxBytes: maxBytes}
}

// ResolveSecrets lets the templates rendered from now on name secrets,
// resolved by resolve; until it is called, {{secret.NAME}} fails.
func (r *Renderer) ResolveSecrets(resolve func(name string) (string, error)) { r.data.Secret = resolve }

// spend counts n more rendered bytes, or fails with ErrRenderTooLarge when
// they would exceed the bound.
func (r *Renderer) spend(n int) error {
	if n > r.maxBytes-r.used {
		return errors.Wrapf(ErrRenderTooLarge, "over %d bytes", r.maxBytes)
	}
	r.used += n
	return nil
}

// root returns the decoded JSON value a placeholder's root refers to,
// decoding it the first time.
func (r *Renderer) root(key rootKey, raw json.RawMessage) (any, error) {
	if d, ok := r.decoded[key]; ok {
		return d.value, d.err
	}
	var d decodedRoot
	if len(raw) == 0 {
		d.err = errors.Newf("%s is empty", key.root)
	} else {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&d.value); err != nil {
			d.value, d.err = nil, errors.Newf("%s is not JSON", key.root)
		}
	}
	if r.decoded == nil {
		r.decoded = map[rootKey]decodedRoot{}
	}
	r.decoded[key] = d
	return d.value, d.err
}

// lookup returns the JSON value a path refers to.
func (r *Renderer) lookup(path []string) (any, error) {
	d := r.data
	var key rootKey
	var raw json.RawMessage
	rest := path[1:]
	switch path[0] {
	case TemplateOrder:
		key, raw = rootKey{root: TemplateOrder}, d.Order
	case TemplateResults:
		if len(path) < 2 {
			return nil, errors.New("name a step")
		}
		res, ok := d.Results[path[1]]
		if !ok {
			return nil, errors.Newf("step %s has no result", path[1])
		}
		key, raw, rest = rootKey{root: TemplateResults, step: path[1]}, res, path[2:]
	case TemplateResult:
		key, raw = rootKey{root: TemplateResult}, d.Result
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
	v, err := r.root(key, raw)
	if err != nil {
		return nil, err
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

// RenderText renders a string template with a Renderer of the default
// bound; escape, when given, escapes each substituted value (for URLs).
func RenderText(tmpl string, data TemplateData, escape func(string) string) (string, error) {
	return NewRenderer(data, 0).Text(tmpl, escape)
}

// RenderJSON renders a JSON body template with a Renderer of the default
// bound (Renderer.JSON).
func RenderJSON(body json.RawMessage, data TemplateData) (json.RawMessage, error) {
	return NewRenderer(data, 0).JSON(body)
}

// Text renders a string template; escape, when given, escapes each
// substituted value (for URLs).
func (r *Renderer) Text(tmpl string, escape func(string) string) (string, error) {
	return r.text(tmpl, escape, true)
}

// text renders tmpl, counting its literal text against the bound when
// literal is set (a JSON body counts its own whole).
func (r *Renderer) text(tmpl string, escape func(string) string, literal bool) (string, error) {
	literalBytes := func(n int) int {
		if literal {
			return n
		}
		return 0
	}
	var b strings.Builder
	last := 0
	for {
		ph, found, err := nextPlaceholder(tmpl, last)
		if err != nil {
			return "", errors.Mark(err, ErrTemplate)
		}
		if !found {
			break
		}
		v, err := r.lookup(ph.path)
		if err != nil {
			return "", errors.Wrapf(ErrTemplate, "{{%s}}: %v", strings.Join(ph.path, "."), err)
		}
		s := text(v)
		if escape != nil {
			s = escape(s)
		}
		if err := r.spend(literalBytes(ph.start-last) + len(s)); err != nil {
			return "", errors.Wrapf(err, "{{%s}}", strings.Join(ph.path, "."))
		}
		// Grow doubles the buffer, where appends grow a large one by a
		// quarter, allocating several times the result on the way.
		b.Grow(ph.start - last + len(s))
		b.WriteString(tmpl[last:ph.start])
		b.WriteString(s)
		last = ph.end
	}
	if err := r.spend(literalBytes(len(tmpl) - last)); err != nil {
		return "", err
	}
	if last == 0 {
		return tmpl, nil
	}
	b.WriteString(tmpl[last:])
	return b.String(), nil
}

// JSON renders a JSON body template: every string in it is a text
// template, and a string that is exactly one placeholder becomes the JSON
// value it refers to (an object, a number, ...).
func (r *Renderer) JSON(body json.RawMessage) (json.RawMessage, error) {
	before := r.used
	if err := r.spend(len(body)); err != nil {
		return nil, errors.Wrap(err, "body template")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, errors.Wrapf(ErrTemplate, "body is not JSON: %v", err)
	}
	var walkErr error
	var render func(v any) any
	render = func(v any) any {
		if walkErr != nil {
			return v
		}
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
			ph, found, err := nextPlaceholder(node, 0)
			if err != nil {
				walkErr = errors.Mark(err, ErrTemplate)
				return node
			}
			if found && ph.start == 0 && ph.end == len(node) {
				value, err := r.lookup(ph.path)
				if err != nil {
					walkErr = errors.Wrapf(ErrTemplate, "{{%s}}: %v", strings.Join(ph.path, "."), err)
					return node
				}
				// Encoded here, so that its size counts before the body
				// is put together.
				encoded, err := json.Marshal(value)
				if err != nil {
					walkErr = errors.Wrapf(ErrTemplate, "{{%s}}: %v", strings.Join(ph.path, "."), err)
					return node
				}
				if err := r.spend(len(encoded)); err != nil {
					walkErr = errors.Wrapf(err, "{{%s}}", strings.Join(ph.path, "."))
					return node
				}
				return json.RawMessage(encoded)
			}
			if !found {
				return node
			}
			s, err := r.text(node, nil, false)
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
	if err != nil {
		return nil, errors.Wrap(err, "encode rendered body")
	}
	// Escaping in the encoding (\u003c for <, ...) can make the body
	// longer than the parts counted: the body as encoded counts.
	r.used = before
	if err := r.spend(len(out)); err != nil {
		return nil, errors.Wrapf(err, "body of %d bytes", len(out))
	}
	return out, nil
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
