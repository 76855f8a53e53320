package engine

import (
	"context"

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
		var wrong *eslog.WrongExpectedVersionError
		switch {
		case err == nil:
			return uint64(max(res.Revision, 0)), nil
		// The sentinels wrapped, with the store's words, as the adapter
		// reports what it gets through the network.
		case errors.As(err, &wrong):
			return 0, errors.Wrap(domain.ErrConcurrencyConflict, err.Error())
		case errors.Is(err, eslog.ErrStreamDeleted):
			return 0, errors.Wrap(errors.Mark(domain.ErrAppendRefused, eventstore.ErrStreamDeleted), err.Error())
		case errors.Is(err, eslog.ErrInvalidRequest):
			return 0, errors.Wrap(domain.ErrAppendRefused, err.Error())
		case errors.Is(err, eslog.ErrClosed), errors.Is(err, eslog.ErrWriteFailed):
			// Unavailable through the network too: retried.
			return 0, errors.Wrap(eventstore.ErrUnavailable, err.Error())
		default:
			// A full disk, or ctx: the caller decides when to try again.
			return 0, err
		}
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
