package engine

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
)

// localAppends is the event-store adapter's in-process path to the
// embedded server of this process (eventstore.Store.AppendInProcess): the
// events as the server stores an append from the network (JSON content,
// the adapter's ids and metadata), the server's limits, and its errors
// marked as the adapter marks those it gets through the network.
func localAppends(srv *esdbserver.Server) eventstore.LocalAppend {
	return func(ctx context.Context, stream string, expected domain.ExpectedRevision, events []eventstore.LocalEvent) (uint64, error) {
		proposed := make([]eslog.ProposedEvent, len(events))
		for i, e := range events {
			proposed[i] = eslog.ProposedEvent{ID: e.ID, Type: e.Type, ContentType: "application/json", Metadata: e.Metadata, Data: e.Data}
		}
		res, err := srv.AppendLocal(ctx, stream, logExpected(expected), proposed)
		if err != nil {
			return 0, appendError(err)
		}
		return uint64(max(res.Revision, 0)), nil
	}
}

// appendError marks a store's append error as the adapter marks what it
// gets through the network: the sentinels wrapped, with the store's words.
func appendError(err error) error {
	var wrong *eslog.WrongExpectedVersionError
	switch {
	case errors.As(err, &wrong):
		return errors.Wrap(domain.ErrConcurrencyConflict, err.Error())
	case errors.Is(err, eslog.ErrStreamDeleted):
		return errors.Wrap(errors.Mark(domain.ErrAppendRefused, eventstore.ErrStreamDeleted), err.Error())
	case errors.Is(err, eslog.ErrInvalidRequest):
		return errors.Wrap(domain.ErrAppendRefused, err.Error())
	case errors.Is(err, eslog.ErrClosed), errors.Is(err, eslog.ErrWriteFailed):
		// Unavailable through the network too: retried.
		return errors.Wrap(eventstore.ErrUnavailable, err.Error())
	default:
		// A full disk, or ctx: neither refused nor retried, as through the
		// network; the caller decides when to try again.
		return err
	}
}

// logExpected is the store's form of an expected revision.
func logExpected(e domain.ExpectedRevision) eslog.Expected {
	if rev, ok := e.Revision(); ok {
		return eslog.Revision(rev)
	}
	if e.IsNoStream() {
		return eslog.NoStreamExpected
	}
	return eslog.Any
}

// localSubscriptions is the event-store adapter's in-process path to $all
// of the embedded server (eventstore.Store.SubscribeInProcess): each event
// as the server would send it, its data and metadata copied out of the
// store's page.
func localSubscriptions(srv *esdbserver.Server) eventstore.LocalSubscribe {
	return func(ctx context.Context, after uint64, hasAfter bool, prefix string, event func(eventstore.LocalRecorded) error, caughtUp func() error) error {
		var prefixes []string
		if prefix != "" {
			prefixes = []string{prefix}
		}
		return srv.SubscribeAllLocal(ctx, after, hasAfter, prefixes, func(e *eslog.RecordedEvent) error {
			// One allocation for both; the page is reused.
			b := make([]byte, len(e.Data)+len(e.Metadata))
			data, meta := b[:copy(b, e.Data):len(e.Data)], b[len(e.Data):]
			copy(meta, e.Metadata)
			return event(eventstore.LocalRecorded{ID: e.ID, Stream: e.Stream, Type: e.Type, Metadata: meta, Data: data,
				Revision: e.Revision, Position: e.Position,
				// As the server sends it: .NET ticks of 100 ns.
				Recorded: time.Unix(0, e.Created/100*100).UTC()})
		}, caughtUp)
	}
}
