package eslog

import (
	"fmt"

	"github.com/cockroachdb/errors"
)

// ErrWrongExpectedVersion is returned (wrapped in a *WrongExpectedVersionError)
// when a write's expected revision does not match the stream.
var ErrWrongExpectedVersion = errors.New("wrong expected version")

// ErrStreamDeleted is returned (wrapped in a *StreamDeletedError) for any
// operation on a tombstoned stream.
var ErrStreamDeleted = errors.New("stream deleted")

// ErrStreamNotFound is returned when reading a stream that has no readable
// events because it never existed or was soft-deleted.
var ErrStreamNotFound = errors.New("stream not found")

// ErrInvalidRequest is returned for requests that can never succeed: an empty
// stream name, an event over the size limit, a missing event type.
var ErrInvalidRequest = errors.New("invalid request")

// ErrClosed is returned once the store is closed.
var ErrClosed = errors.New("store closed")

// ErrLocked is returned by Open when another Store, in this process or in
// another one, has the data directory open. Only one may write a log.
var ErrLocked = errors.New("data directory locked")

// ErrCorrupt is returned by Open when the log on disk is damaged somewhere
// other than a torn tail: a bad frame in an older segment, or one followed by
// a valid frame. The message names the file and the byte offset. Open cuts a
// torn tail instead, logs it and keeps its bytes next to the segment.
var ErrCorrupt = errors.New("log corrupt")

// ErrWriteFailed is returned for the write during which a disk write or
// fsync failed in a way that leaves the log's state on disk unknown (above
// all a failed fsync), and for every write after it: the store refuses
// writes until it is reopened. Health reports the same error. The failed
// write itself may or may not be on disk after the restart, as with a
// timeout; a retry with the same event ids is safe.
var ErrWriteFailed = errors.New("store failed a disk write")

// ErrNoSpace is returned for a write that failed because the disk (or the
// quota) is full. The store cut the partial write, so nothing of it is on
// disk, and it accepts later writes as soon as they succeed again.
var ErrNoSpace = errors.New("no space left for the event log")

// NoStream is the revision reported for a stream that does not exist.
const NoStream int64 = -1

// ExpectedKind says how a write's expected revision is checked.
type ExpectedKind int

// The kinds of expected revision.
const (
	ExpectAny ExpectedKind = iota
	ExpectNoStream
	ExpectStreamExists
	ExpectRevision
)

// Expected is the optimistic-concurrency condition of a write.
type Expected struct {
	Kind     ExpectedKind
	Revision uint64
}

// Any, NoStreamExpected, StreamExists and Revision build Expected values.
var (
	Any              = Expected{Kind: ExpectAny}
	NoStreamExpected = Expected{Kind: ExpectNoStream}
	StreamExists     = Expected{Kind: ExpectStreamExists}
)

// Revision expects the stream's last event to have revision r.
func Revision(r uint64) Expected { return Expected{Kind: ExpectRevision, Revision: r} }

func (e Expected) String() string {
	switch e.Kind {
	case ExpectNoStream:
		return "no_stream"
	case ExpectStreamExists:
		return "stream_exists"
	case ExpectRevision:
		return fmt.Sprint(e.Revision)
	default:
		return "any"
	}
}

// WrongExpectedVersionError carries what was expected and what the stream is.
type WrongExpectedVersionError struct {
	Stream   string
	Expected Expected
	// Current is the stream's last revision, or NoStream.
	Current int64
}

func (e *WrongExpectedVersionError) Error() string {
	current := fmt.Sprint(e.Current)
	if e.Current == NoStream {
		current = "no_stream"
	}
	return fmt.Sprintf("wrong expected version for stream %q: expected %s, current %s", e.Stream, e.Expected, current)
}

// Unwrap makes errors.Is(err, ErrWrongExpectedVersion) true.
func (e *WrongExpectedVersionError) Unwrap() error { return ErrWrongExpectedVersion }

// StreamDeletedError names the tombstoned stream.
type StreamDeletedError struct{ Stream string }

func (e *StreamDeletedError) Error() string { return fmt.Sprintf("stream %q is deleted", e.Stream) }

// Unwrap makes errors.Is(err, ErrStreamDeleted) true.
func (e *StreamDeletedError) Unwrap() error { return ErrStreamDeleted }

// ProposedEvent is an event as a client proposes it.
type ProposedEvent struct {
	ID          [16]byte
	Type        string
	ContentType string
	// Metadata is the client's custom metadata.
	Metadata []byte
	Data     []byte
}

// RecordedEvent is an event as stored.
type RecordedEvent struct {
	ProposedEvent
	Stream   string
	Revision uint64
	// Position is the event's place in $all: its byte offset in the log.
	Position uint64
	// Created is the append time in Unix nanoseconds.
	Created int64
}

// WriteResult describes a successful write.
type WriteResult struct {
	// Revision is the stream's last revision after the write, or NoStream.
	Revision int64
	// Position is the $all position of the write's last event or marker, zero
	// for a write that wrote nothing.
	Position uint64
}

// Direction orders a read.
type Direction int

// The read directions.
const (
	Forwards Direction = iota
	Backwards
)
