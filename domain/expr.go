package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
)

// Limits of a step's condition.
const (
	// MaxConditionBytes bounds the text of a condition.
	MaxConditionBytes = 1000
	// maxConditionDepth bounds the nesting of a condition.
	maxConditionDepth = 32
)

// ErrInvalidCondition is returned for a condition that does not parse.
var ErrInvalidCondition = errors.New("invalid condition")

// Condition is a parsed step condition (StepDefinition.When): a small
// expression over the order, the results of the steps before and the
// task. Its grammar, loosest first:
//
//	or      = and {"or" and}
//	and     = not {"and" not}
//	not     = "not" not | compare
//	compare = operand [("==" | "!=" | "<" | "<=" | ">" | ">=" | "in") operand]
//	operand = "(" or ")" | "[" [or {"," or}] "]" | string | number | true | false | null | path
//	path    = ("order" | "results" | "task") {"." name | "[" index "]"}
//
// A comparison with a missing field is false, whatever its operator; an
// operand alone (a path: presence) is true when it is present and neither
// null nor false. Strings are quoted with " or '.
type Condition struct {
	text string
	root node
}

// String returns the condition's text.
func (c *Condition) String() string { return c.text }

// node is a part of a condition; eval returns its value and whether it is
// present (a path to a missing field is not).
type node interface {
	eval(env map[string]any) (any, bool)
}

// ParseCondition parses a condition's text.
func ParseCondition(text string) (*Condition, error) {
	if len(text) > MaxConditionBytes {
		return nil, invalidCondition(errors.Newf("%d bytes is over the limit of %d", len(text), MaxConditionBytes))
	}
	if !utf8.ValidString(text) {
		return nil, invalidCondition(errors.New("not valid UTF-8"))
	}
	toks, err := lexCondition(text)
	if err != nil {
		return nil, invalidCondition(err)
	}
	p := &condParser{toks: toks}
	root, err := p.or(0)
	if err == nil && p.pos < len(p.toks) {
		err = errors.Newf("unexpected %s", p.toks[p.pos])
	}
	if err != nil {
		return nil, invalidCondition(err)
	}
	return &Condition{text: text, root: root}, nil
}

// invalidCondition says why a condition does not parse.
func invalidCondition(err error) error { return &conditionError{why: err.Error()} }

// conditionError says why a condition does not parse; it wraps
// ErrInvalidCondition.
type conditionError struct{ why string }

func (e *conditionError) Error() string { return "invalid condition: " + e.why }
func (e *conditionError) Unwrap() error { return ErrInvalidCondition }

// Paths returns the paths the condition reads, each as its names (indexes
// as written).
func (c *Condition) Paths() [][]string {
	var out [][]string
	var walk func(n node)
	walk = func(n node) {
		switch n := n.(type) {
		case pathNode:
			out = append(out, n)
		case notNode:
			walk(n.x)
		case binNode:
			walk(n.l)
			walk(n.r)
		case listNode:
			for _, x := range n {
				walk(x)
			}
		}
	}
	walk(c.root)
	return out
}

// Eval evaluates the condition over the task's order, the results of the
// steps before (by name) and the task's id, workflow and version.
func (c *Condition) Eval(order json.RawMessage, results map[string]json.RawMessage, task map[string]any) bool {
	env := map[string]any{TemplateOrder: decodeValue(order), TemplateTask: task}
	rs := make(map[string]any, len(results))
	for name, r := range results {
		rs[name] = decodeValue(r)
	}
	env[TemplateResults] = rs
	v, ok := c.root.eval(env)
	return ok && truthy(v)
}

// decodeValue decodes JSON with numbers as json.Number; nil when absent or
// not JSON.
func decodeValue(data json.RawMessage) any {
	if len(data) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil
	}
	return v
}

func truthy(v any) bool { return v != nil && v != false }

type token struct {
	kind byte // 'i' name, 's' string, 'n' number, 'o' operator or punctuation
	text string
	str  string // a string's value
}

func (t token) String() string {
	if t.kind == 's' {
		return strconv.Quote(t.str)
	}
	return strconv.Quote(t.text)
}

func lexCondition(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'':
			j, b := i+1, strings.Builder{}
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, errors.New("a string is not closed")
			}
			toks = append(toks, token{kind: 's', text: s[i : j+1], str: b.String()})
			i = j + 1
		case c >= '0' && c <= '9' || c == '-' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i + 1
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' || s[j] == 'e' || s[j] == 'E') {
				j++
			}
			if _, err := strconv.ParseFloat(s[i:j], 64); err != nil {
				return nil, errors.Newf("%q is not a number", s[i:j])
			}
			toks = append(toks, token{kind: 'n', text: s[i:j]})
			i = j
		case c == '_' || c < utf8.RuneSelf && unicode.IsLetter(rune(c)):
			j := i + 1
			for j < len(s) && (s[j] == '_' || s[j] == '-' || s[j] < utf8.RuneSelf && (unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j])))) {
				j++
			}
			toks = append(toks, token{kind: 'i', text: s[i:j]})
			i = j
		default:
			op := ""
			for _, o := range []string{"==", "!=", "<=", ">=", "<", ">", "(", ")", "[", "]", ",", "."} {
				if strings.HasPrefix(s[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				r, _ := utf8.DecodeRuneInString(s[i:])
				return nil, errors.Newf("unexpected %q", r)
			}
			toks = append(toks, token{kind: 'o', text: op})
			i += len(op)
		}
	}
	return toks, nil
}

type condParser struct {
	toks []token
	pos  int
}

func (p *condParser) peek() (token, bool) {
	if p.pos < len(p.toks) {
		return p.toks[p.pos], true
	}
	return token{}, false
}

// accept consumes the next token when it is the operator or word text.
func (p *condParser) accept(text string) bool {
	if t, ok := p.peek(); ok && t.kind != 's' && t.text == text {
		p.pos++
		return true
	}
	return false
}

func (p *condParser) deeper(depth int) error {
	if depth > maxConditionDepth {
		return errors.Newf("nested more than %d deep", maxConditionDepth)
	}
	return nil
}

func (p *condParser) or(depth int) (node, error) {
	l, err := p.and(depth)
	for err == nil && p.accept("or") {
		var r node
		if r, err = p.and(depth); err == nil {
			l = binNode{op: "or", l: l, r: r}
		}
	}
	return l, err
}

func (p *condParser) and(depth int) (node, error) {
	l, err := p.not(depth)
	for err == nil && p.accept("and") {
		var r node
		if r, err = p.not(depth); err == nil {
			l = binNode{op: "and", l: l, r: r}
		}
	}
	return l, err
}

func (p *condParser) not(depth int) (node, error) {
	if err := p.deeper(depth); err != nil {
		return nil, err
	}
	if p.accept("not") {
		x, err := p.not(depth + 1)
		return notNode{x}, err
	}
	return p.compare(depth)
}

func (p *condParser) compare(depth int) (node, error) {
	l, err := p.operand(depth)
	if err != nil {
		return nil, err
	}
	for _, op := range []string{"==", "!=", "<=", ">=", "<", ">", "in"} {
		if p.accept(op) {
			r, err := p.operand(depth)
			return binNode{op: op, l: l, r: r}, err
		}
	}
	return l, nil
}

func (p *condParser) operand(depth int) (node, error) {
	t, ok := p.peek()
	if !ok {
		return nil, errors.New("unexpected end")
	}
	p.pos++
	switch {
	case t.kind == 's':
		return litNode{t.str}, nil
	case t.kind == 'n':
		return litNode{json.Number(t.text)}, nil
	case t.kind == 'o' && t.text == "(":
		x, err := p.or(depth + 1)
		if err == nil && !p.accept(")") {
			err = errors.New("a ( is not closed")
		}
		return x, err
	case t.kind == 'o' && t.text == "[":
		var list listNode
		if p.accept("]") {
			return list, nil
		}
		for {
			x, err := p.or(depth + 1)
			if err != nil {
				return nil, err
			}
			list = append(list, x)
			if p.accept("]") {
				return list, nil
			}
			if !p.accept(",") {
				return nil, errors.New("a [ is not closed")
			}
		}
	case t.kind == 'i' && t.text == "true":
		return litNode{true}, nil
	case t.kind == 'i' && t.text == "false":
		return litNode{false}, nil
	case t.kind == 'i' && t.text == "null":
		return litNode{nil}, nil
	case t.kind == 'i' && (t.text == TemplateOrder || t.text == TemplateResults || t.text == TemplateTask):
		path := pathNode{t.text}
		for {
			switch {
			case p.accept("."):
				n, ok := p.peek()
				if !ok || n.kind != 'i' {
					return nil, errors.Newf("a name must follow %s.", strings.Join(path, "."))
				}
				p.pos++
				path = append(path, n.text)
			case p.accept("["):
				n, ok := p.peek()
				if !ok || (n.kind != 'n' && n.kind != 's') || !p.nextIs(1, "]") {
					return nil, errors.Newf("an index or a quoted name in [] must follow %s", strings.Join(path, "."))
				}
				p.pos += 2
				name := n.str
				if n.kind == 'n' {
					name = n.text
				}
				path = append(path, name)
			default:
				return path, nil
			}
		}
	case t.kind == 'i':
		return nil, errors.Newf("unknown name %q: a condition reads order, results and task", t.text)
	}
	return nil, errors.Newf("unexpected %s", t)
}

// nextIs reports whether the token ahead by n is the operator text.
func (p *condParser) nextIs(n int, text string) bool {
	i := p.pos + n
	return i < len(p.toks) && p.toks[i].kind == 'o' && p.toks[i].text == text
}

type litNode struct{ v any }

func (n litNode) eval(map[string]any) (any, bool) { return n.v, true }

type listNode []node

func (n listNode) eval(env map[string]any) (any, bool) {
	out := make([]any, 0, len(n))
	for _, x := range n {
		v, ok := x.eval(env)
		if !ok {
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}

type pathNode []string

func (n pathNode) eval(env map[string]any) (any, bool) {
	var cur any = env
	for _, name := range n {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[name]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(name)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

type notNode struct{ x node }

func (n notNode) eval(env map[string]any) (any, bool) {
	v, ok := n.x.eval(env)
	return !ok || !truthy(v), true
}

type binNode struct {
	op   string
	l, r node
}

func (n binNode) eval(env map[string]any) (any, bool) {
	l, lok := n.l.eval(env)
	switch n.op {
	case "and":
		if !lok || !truthy(l) {
			return false, true
		}
		r, rok := n.r.eval(env)
		return rok && truthy(r), true
	case "or":
		if lok && truthy(l) {
			return true, true
		}
		r, rok := n.r.eval(env)
		return rok && truthy(r), true
	}
	r, rok := n.r.eval(env)
	if !lok || !rok {
		return false, true
	}
	switch n.op {
	case "==":
		return equalValues(l, r), true
	case "!=":
		return !equalValues(l, r), true
	case "in":
		list, ok := r.([]any)
		if !ok {
			return false, true
		}
		for _, x := range list {
			if equalValues(l, x) {
				return true, true
			}
		}
		return false, true
	}
	c, ok := compareValues(l, r)
	if !ok {
		return false, true
	}
	switch n.op {
	case "<":
		return c < 0, true
	case "<=":
		return c <= 0, true
	case ">":
		return c > 0, true
	default:
		return c >= 0, true
	}
}

// equalValues compares JSON values, numbers by value.
func equalValues(a, b any) bool {
	if c, ok := compareValues(a, b); ok {
		return c == 0
	}
	return reflect.DeepEqual(a, b)
}

// compareValues orders two numbers or two strings.
func compareValues(a, b any) (int, bool) {
	if x, ok := a.(string); ok {
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), true
		}
		return 0, false
	}
	x, okx := number(a)
	y, oky := number(b)
	switch {
	case !okx || !oky:
		return 0, false
	case x < y:
		return -1, true
	case x > y:
		return 1, true
	}
	return 0, true
}

func number(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

// validateConditions parses every step's condition and checks the paths it
// reads: results only of steps that always run before, task only its id,
// workflow and version.
func validateConditions(w *Workflow, add func(string, string, ...any)) {
	for i, s := range w.Steps {
		if s.When == "" {
			continue
		}
		path := fmt.Sprintf("steps[%d].when", i)
		c, err := ParseCondition(s.When)
		if err != nil {
			add(path, "%v", err)
			continue
		}
		scope := templateScope{workflow: w, before: i}
		for _, p := range c.Paths() {
			if p[0] == TemplateResults && len(p) < 2 {
				add(path, "%s: name a step: results.STEP", strings.Join(p, "."))
				continue
			}
			if err := scope.checkPath(p); err != nil {
				add(path, "%s: %v", strings.Join(p, "."), err)
			}
		}
	}
}

// taskFields are what a condition reads as task.
func taskFields(t *Task) map[string]any {
	return map[string]any{"id": t.ID, "workflow": t.Workflow, "version": json.Number(strconv.Itoa(t.WorkflowVersion))}
}
