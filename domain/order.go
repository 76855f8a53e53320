package domain

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
)

// ErrInvalidMessage is returned for a message from outside (an order, a
// reply, a command) that cannot be accepted; the wrapped text says why.
var ErrInvalidMessage = errors.New("invalid message")

// MaxOrderIDLength bounds order (task) ids, which become stream names and
// Kafka keys.
const MaxOrderIDLength = 200

var (
	idPattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]*$`)
	topicPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)
)

// Order is a message that starts a task, as read through its workflow's
// trigger (OrderDocument.Order): the task's id, the workflow and version it
// runs, the topic that receives its status messages, and the whole message
// body, which the task keeps as its order.
type Order struct {
	ID              string
	Workflow        string
	WorkflowVersion int
	ReplyTo         string
	// Priority is the task's priority: the message's, at its trigger's
	// PriorityField, else its workflow's default; never empty.
	Priority Priority
	// Body is the whole message body.
	Body json.RawMessage
}

func invalidf(format string, args ...any) error {
	return errors.Wrapf(ErrInvalidMessage, format, args...)
}

// OrderDocument is the decoded body of a message that may start a task,
// before a workflow is chosen for it.
type OrderDocument struct {
	raw  json.RawMessage
	tree map[string]any
}

// ParseOrderDocument checks that body is a JSON object of at most maxSize
// bytes (no limit if maxSize is 0) and decodes it.
func ParseOrderDocument(body []byte, maxSize int) (OrderDocument, error) {
	var d OrderDocument
	if maxSize > 0 && len(body) > maxSize {
		return d, invalidf("order is %d bytes, over the limit of %d", len(body), maxSize)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return d, invalidf("order is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	if err := dec.Decode(&d.tree); err != nil {
		return d, invalidf("order is not valid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	// The whole body is the object: More would miss a stray ']' or '}'.
	if dec.InputOffset() != int64(len(trimmed)) {
		return d, invalidf("order is not valid JSON: data after the object")
	}
	d.raw = json.RawMessage(trimmed)
	return d, nil
}

// Lookup returns the value at a JSON pointer (RFC 6901).
func (d OrderDocument) Lookup(pointer string) (any, bool) {
	if pointer == "" || pointer[0] != '/' {
		return nil, false
	}
	var v any = d.tree
	for _, seg := range strings.Split(pointer[1:], "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		switch node := v.(type) {
		case map[string]any:
			next, ok := node[seg]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(node) {
				return nil, false
			}
			v = node[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// text returns the string (or number, as text) at a pointer; absent and
// null are empty.
func (d OrderDocument) text(pointer, name string) (string, error) {
	v, ok := d.Lookup(pointer)
	switch v := v.(type) {
	case nil:
		_ = ok
		return "", nil
	case string:
		return v, nil
	case json.Number:
		return string(v), nil
	}
	return "", invalidf("%s at %s must be a string", name, pointer)
}

// Requested returns the workflow and version a saga-shaped order asks for
// in its workflow and workflowVersion fields; empty and 0 when it does not.
// A workflowVersion without a workflow is ErrInvalidMessage.
func (d OrderDocument) Requested() (workflow string, version int, err error) {
	if workflow, err = d.text("/workflow", "workflow"); err != nil {
		return "", 0, err
	}
	if v, ok := d.Lookup("/workflowVersion"); ok && v != nil {
		n, isNum := v.(json.Number)
		i, convErr := strconv.Atoi(string(n))
		if !isNum || convErr != nil || i < 1 {
			return "", 0, invalidf("workflowVersion must be a whole number from 1")
		}
		version = i
	}
	if version != 0 && workflow == "" {
		// Without a name the version would be dropped and the order run
		// on whatever workflow its topic starts, at its newest version.
		return "", 0, invalidf("workflowVersion %d needs workflow: name the workflow it is a version of", version)
	}
	return workflow, version, nil
}

// ReplyTo returns the reply topic the order names at the trigger's
// ReplyToField (default /replyTo), if it names a valid one; it lets a
// rejection reach a caller even before a workflow is chosen.
func (d OrderDocument) ReplyTo(tr Trigger) string {
	pointer := tr.ReplyToField
	if pointer == "" {
		pointer = DefaultReplyToField
	}
	s, err := d.text(pointer, "replyTo")
	if err != nil || !topicPattern.MatchString(s) {
		return ""
	}
	return s
}

// Matches reports whether the message, arrived on topic with CloudEvents
// type ceType (may be empty), is one the trigger starts a task for.
func (d OrderDocument) Matches(tr Trigger, topic, ceType string) bool {
	if !slices.Contains(tr.TopicsOrDefault(), topic) {
		return false
	}
	if tr.Type == "" {
		return true
	}
	if tr.TypeField != "" {
		got, err := d.text(tr.TypeField, "type")
		return err == nil && got == tr.Type
	}
	return ceType == tr.Type
}

// Order reads the order as the workflow's trigger says: the task id from
// IDField (or the record key), the reply topic from ReplyToField, the
// priority from PriorityField (default /priority; absent or null means the
// workflow's default priority, else normal).
func (d OrderDocument) Order(wf *Workflow, key string) (Order, error) {
	o := Order{Workflow: wf.Name, WorkflowVersion: wf.Version, Body: d.raw}
	var err error
	switch idField := wf.Trigger.IDField; idField {
	case KeyIDField:
		o.ID = key
		if key == "" {
			return o, invalidf("order has no record key to use as its id")
		}
	default:
		if idField == "" {
			idField = DefaultIDField
		}
		if o.ID, err = d.text(idField, "the order id"); err != nil {
			return o, err
		}
		if o.ID == "" {
			if idField == DefaultIDField {
				return o, invalidf("order has no orderId")
			}
			return o, invalidf("order has no id at %s", idField)
		}
	}
	replyField := wf.Trigger.ReplyToField
	if replyField == "" {
		replyField = DefaultReplyToField
	}
	if o.ReplyTo, err = d.text(replyField, "replyTo"); err != nil {
		return o, err
	}
	if o.Priority, err = d.priority(wf); err != nil {
		return o, err
	}
	switch {
	case len(o.ID) > MaxOrderIDLength || !idPattern.MatchString(o.ID):
		return o, invalidf("orderId %q must be 1 to %d letters, digits or ._:@- and start with a letter or digit", truncate(o.ID), MaxOrderIDLength)
	case o.ReplyTo != "" && !topicPattern.MatchString(o.ReplyTo):
		return o, invalidf("replyTo %q is not a valid topic name", truncate(o.ReplyTo))
	}
	return o, nil
}

// priority reads the order's priority at the trigger's PriorityField,
// falling back to the workflow's default.
func (d OrderDocument) priority(wf *Workflow) (Priority, error) {
	pointer := wf.Trigger.PriorityField
	if pointer == "" {
		pointer = DefaultPriorityField
	}
	v, _ := d.Lookup(pointer)
	switch v := v.(type) {
	case nil:
		return wf.Priority.OrNormal(), nil
	case string:
		p, err := ParsePriority(v)
		if err != nil || v == "" {
			return "", invalidf("priority at %s must be high, normal or low, not %q", pointer, truncate(v))
		}
		return p, nil
	}
	return "", invalidf("priority at %s must be high, normal or low (a string), not %v", pointer, truncate(fmtValue(v)))
}

func fmtValue(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func truncate(s string) string {
	if len(s) > 64 {
		return CutUTF8(s, 64) + "…"
	}
	return s
}
