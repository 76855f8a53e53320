package eventstore

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/cockroachdb/errors"

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

// appendInProcess appends through s.local.
func (s *Store) appendInProcess(ctx context.Context, stream string, expected domain.ExpectedRevision, events []domain.NewEvent) (uint64, error) {
	local := make([]LocalEvent, len(events))
	for i, e := range events {
		meta, err := json.Marshal(e.Metadata)
		if err != nil {
			return 0, errors.Wrap(err, "encode event metadata")
		}
		id, err := eventID(stream, expected, i, e)
		if err != nil {
			return 0, err
		}
		local[i] = LocalEvent{ID: id, Type: e.Type, Metadata: meta, Data: e.Data}
	}
	began := time.Now()
	backoff := 20 * time.Millisecond
	var rev uint64
	var err error
	for {
		// Retrying with the same ids is idempotent, as through the network.
		rev, err = s.local(ctx, stream, expected, local)
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(backoff/2 + rand.N(backoff/2+1)):
		case <-ctx.Done():
			err = errors.Wrap(err, "gave up: "+ctx.Err().Error())
		}
		backoff = min(2*backoff, time.Second)
	}
	if s.observeAppend != nil {
		outcome := AppendFailed
		switch {
		case err == nil:
			outcome = AppendOK
		case errors.Is(err, domain.ErrConcurrencyConflict):
			outcome = AppendConflict
		case errors.Is(err, domain.ErrAppendRefused):
			outcome = AppendRefused
		}
		s.observeAppend(outcome, time.Since(began))
	}
	if err != nil {
		return 0, errors.Wrapf(err, "append to %s", stream)
	}
	return rev, nil
}
