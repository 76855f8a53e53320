package eventstore

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/sagaengine/saga/domain"
)

// LocalEvent is an event as Append hands it to a LocalAppend: its id, type,
// custom metadata and data, as they are stored.
type LocalEvent struct {
	ID       [16]byte
	Type     string
	Metadata []byte
	Data     []byte
}

// LocalAppend appends events to an event store running in the same process
// (saga's embedded server), with the checks and durability of an append
// through the network, and returns the revision of the stream's last event.
// Its errors are marked as Append's are: domain.ErrConcurrencyConflict when
// expected does not hold, domain.ErrAppendRefused (with ErrStreamDeleted for
// a deleted stream) when the append can never succeed as it is, and
// ErrUnavailable when the store cannot write now (Append retries those).
type LocalAppend func(ctx context.Context, stream string, expected domain.ExpectedRevision, events []LocalEvent) (uint64, error)

// ErrStreamDeleted marks an append refused because its stream was
// tombstoned.
var ErrStreamDeleted = errStreamDeleted

// ErrUnavailable marks a LocalAppend error that passes once the store can
// write again (it is starting or stopping); Append retries it.
var ErrUnavailable = errors.New("event store unavailable")

// AppendInProcess makes every Append of the Store go through local, to the
// embedded server of the same process, instead of through the network:
// the same events, ids, checks and durability, without gRPC (two network
// hops and their goroutines per append). Reads and subscriptions still go
// through the server. Call it before the Store is used.
func (s *Store) AppendInProcess(local LocalAppend) { s.local = local }

// LocalRecorded is a recorded event as a LocalSubscribe delivers it; the
// adapter keeps its Data and Metadata, so they must be the event's own.
type LocalRecorded struct {
	ID       [16]byte
	Stream   string
	Type     string
	Metadata []byte
	Data     []byte
	Revision uint64
	Position uint64
	Recorded time.Time
}

// LocalSubscribe follows $all of an event store in the same process, as a
// filtered catch-up subscription does: the events of streams starting with
// prefix (all when empty) after position after (from the start when
// hasAfter is false), in order; then caughtUp once; then live, until ctx
// ends or a callback fails (its error returned as it is). Any other error
// ends the subscription, which SubscribeAll then resubscribes after the
// last event delivered.
type LocalSubscribe func(ctx context.Context, after uint64, hasAfter bool, prefix string,
	event func(LocalRecorded) error, caughtUp func() error) error

// SubscribeInProcess makes SubscribeAll follow $all through local, in the
// same process as the embedded server, instead of through the network: the
// same events, order and hand-over from catch-up to live, without gRPC.
// Call it before the Store is used.
func (s *Store) SubscribeInProcess(local LocalSubscribe) { s.localSubscribe = local }

// followLocal follows $all through s.localSubscribe, as followAll does
// through the network.
func (s *Store) followLocal(ctx context.Context, prefix string, handle func(domain.SubscriptionItem) error, after *allPosition) error {
	return s.localSubscribe(ctx, after.commit, after.set, prefix, func(e LocalRecorded) error {
		rec := domain.RecordedEvent{ID: uuid.UUID(e.ID).String(), Stream: e.Stream, Type: e.Type, Data: e.Data,
			Revision: e.Revision, Position: e.Position, Recorded: e.Recorded}
		decodeMetadata(e.Metadata, &rec.Metadata) // foreign events may carry none
		if !systemEvent(&rec) {
			if err := handle(domain.SubscriptionItem{Event: &rec}); err != nil {
				return handlerError{err}
			}
		}
		// The embedded store has no transactions: both parts are one.
		*after = allPosition{commit: rec.Position, prepare: rec.Position, set: true}
		return nil
	}, func() error {
		if err := handle(domain.SubscriptionItem{CaughtUp: true}); err != nil {
			return handlerError{err}
		}
		return nil
	})
}
