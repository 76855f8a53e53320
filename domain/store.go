package domain

import (
	"time"

	"github.com/cockroachdb/errors"
)

// ErrConcurrencyConflict is returned by an event store when an append's
// expected revision is not the stream's current revision: another writer got
// there first, and the caller must re-read and decide again.
var ErrConcurrencyConflict = errors.New("concurrency conflict: the stream moved on")

// ErrAppendRefused is returned by an event store for an append it refused
// and would refuse again however often it were retried: events too large or
// invalid, or a deleted stream. The caller must not retry it; the message
// that caused it is dead-lettered with the reason.
var ErrAppendRefused = errors.New("append refused by the event store")

// TaskStreamPrefix starts the name of every task stream.
const TaskStreamPrefix = "task-"

// TaskStream names the event stream of a task.
func TaskStream(taskID string) string { return TaskStreamPrefix + taskID }

// TaskIDFromStream returns the task id of a task stream name.
func TaskIDFromStream(stream string) (string, bool) {
	if len(stream) <= len(TaskStreamPrefix) || stream[:len(TaskStreamPrefix)] != TaskStreamPrefix {
		return "", false
	}
	return stream[len(TaskStreamPrefix):], true
}

// EventMetadata travels with every stored event.
type EventMetadata struct {
	// CorrelationID is the order (task) id the event belongs to.
	CorrelationID string `json:"correlationId"`
	// CausationID is the id of the event or message that caused this one.
	CausationID string `json:"causationId,omitempty"`
	// Actor is the scheduler, supervisor, submitter or operator instance
	// that wrote the event.
	Actor string `json:"actor"`
	// TraceParent is the W3C trace context of the work, when there is one.
	TraceParent string `json:"traceparent,omitempty"`
}

// NewEvent is an event to append.
type NewEvent struct {
	// ID identifies the event; when empty the store derives one from the
	// stream, revision and content, so that an identical retried append is
	// recognised as already written.
	ID       string
	Type     string
	Data     []byte
	Metadata EventMetadata
}

// RecordedEvent is an event as read back from the store.
type RecordedEvent struct {
	ID       string
	Stream   string
	Type     string
	Data     []byte
	Metadata EventMetadata
	// Revision is the event's number in its stream, from zero.
	Revision uint64
	// Position is the event's place in the store's global order.
	Position uint64
	Recorded time.Time
	// Decoded caches the decoded task event when the source decoded it
	// once for several readers; use Decode.
	Decoded Event
}

// Decode returns the task event, decoding it unless it was decoded already.
func (r *RecordedEvent) Decode() (Event, error) {
	if r.Decoded != nil {
		return r.Decoded, nil
	}
	return DecodeEvent(r.Type, r.Data)
}

// ExpectedRevision is the optimistic-concurrency condition of an append.
type ExpectedRevision struct {
	kind     expectKind
	revision uint64
}

type expectKind int

const (
	expectAny expectKind = iota
	expectNoStream
	expectRevision
)

// ExpectAny appends whatever the stream's revision.
func ExpectAny() ExpectedRevision { return ExpectedRevision{kind: expectAny} }

// ExpectNoStream appends only if the stream does not exist yet.
func ExpectNoStream() ExpectedRevision { return ExpectedRevision{kind: expectNoStream} }

// ExpectRevision appends only if the stream's last event has revision r.
func ExpectRevision(r uint64) ExpectedRevision {
	return ExpectedRevision{kind: expectRevision, revision: r}
}

// ExpectAfter expects the stream to be exactly as a fold of revision rev
// left it; rev is -1 for a stream never written.
func ExpectAfter(rev int64) ExpectedRevision {
	if rev < 0 {
		return ExpectNoStream()
	}
	return ExpectRevision(uint64(rev))
}

// IsAny, IsNoStream and Revision describe the condition.
func (e ExpectedRevision) IsAny() bool      { return e.kind == expectAny }
func (e ExpectedRevision) IsNoStream() bool { return e.kind == expectNoStream }

// Revision returns the exact revision expected, if there is one.
func (e ExpectedRevision) Revision() (uint64, bool) { return e.revision, e.kind == expectRevision }

// SubscriptionItem is one delivery of a subscription: an event, or the news
// that the subscription has caught up with the live end of the store. A
// subscription that reconnects may report caught-up again.
type SubscriptionItem struct {
	Event    *RecordedEvent
	CaughtUp bool
}

// SubscribeFrom says where a subscription to all events starts.
type SubscribeFrom struct {
	position uint64
	after    bool
}

// FromStart subscribes from the first event.
func FromStart() SubscribeFrom { return SubscribeFrom{} }

// AfterPosition subscribes to the events after position p (a checkpoint).
func AfterPosition(p uint64) SubscribeFrom { return SubscribeFrom{position: p, after: true} }

// After returns the checkpoint position, if there is one.
func (f SubscribeFrom) After() (uint64, bool) { return f.position, f.after }

// TaskCheckpoint is a position in the store together with the tasks that
// were unfinished there: a follower that folds every event up to Position
// and then loads these tasks' streams knows every task that still needs it,
// without reading finished history.
type TaskCheckpoint struct {
	Position uint64
	// Tasks are the ids of the tasks unfinished at Position (and possibly
	// some that finished: loading them shows it).
	Tasks []string
}

// Before reports whether a subscription from f delivers some event that
// one from g does not: f starts earlier.
func (f SubscribeFrom) Before(g SubscribeFrom) bool {
	switch {
	case !g.after:
		return false
	case !f.after:
		return true
	}
	return f.position < g.position
}
