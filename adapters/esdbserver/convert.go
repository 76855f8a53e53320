package esdbserver

import (
	"context"
	"regexp"
	"strconv"
	"strings"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
	"github.com/sagaengine/saga/adapters/esdbwire"
)

// Metadata keys the protocol reserves on every event.
const (
	metaType        = esdbwire.MetaType
	metaContentType = esdbwire.MetaContentType
	metaCreated     = "created"
)

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// parseUUID reads an event id in either of the protocol's forms.
func parseUUID(id *shared.UUID) ([16]byte, error) { return esdbwire.ParseUUID(id) }

func streamName(id *shared.StreamIdentifier) (string, error) {
	name := string(id.GetStreamName())
	if name == "" {
		return "", invalid("stream name is empty")
	}
	return name, nil
}

// expectedFrom converts any of the protocol's expected-revision oneofs.
func expectedFrom(v any) eslog.Expected {
	switch r := v.(type) {
	case *streams.AppendReq_Options_Revision:
		return eslog.Revision(r.Revision)
	case *streams.AppendReq_Options_NoStream:
		return eslog.NoStreamExpected
	case *streams.AppendReq_Options_StreamExists:
		return eslog.StreamExists
	case *streams.DeleteReq_Options_Revision:
		return eslog.Revision(r.Revision)
	case *streams.DeleteReq_Options_NoStream:
		return eslog.NoStreamExpected
	case *streams.DeleteReq_Options_StreamExists:
		return eslog.StreamExists
	case *streams.TombstoneReq_Options_Revision:
		return eslog.Revision(r.Revision)
	case *streams.TombstoneReq_Options_NoStream:
		return eslog.NoStreamExpected
	case *streams.TombstoneReq_Options_StreamExists:
		return eslog.StreamExists
	default:
		return eslog.Any
	}
}

func toProposed(m *streams.AppendReq_ProposedMessage) (eslog.ProposedEvent, error) {
	id, err := parseUUID(m.GetId())
	if err != nil {
		return eslog.ProposedEvent{}, err
	}
	typ := m.GetMetadata()[metaType]
	if typ == "" {
		return eslog.ProposedEvent{}, invalid("event %s has no %q metadata", uuid.UUID(id), metaType)
	}
	contentType := m.GetMetadata()[metaContentType]
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	return eslog.ProposedEvent{ID: id, Type: typ, ContentType: contentType, Metadata: m.GetCustomMetadata(), Data: m.GetData()}, nil
}

// toFilter converts a read's filter, refusing a regex over maxRegex bytes:
// Go's regexp runs in linear time, but in time linear in the regex's size
// for every event examined.
func toFilter(f *streams.ReadReq_Options_FilterOptions, maxRegex int) (*eslog.Filter, error) {
	if f == nil {
		return nil, nil
	}
	var expr *streams.ReadReq_Options_FilterOptions_Expression
	out := &eslog.Filter{}
	switch v := f.GetFilter().(type) {
	case *streams.ReadReq_Options_FilterOptions_StreamIdentifier:
		expr = v.StreamIdentifier
	case *streams.ReadReq_Options_FilterOptions_EventType:
		expr = v.EventType
		out.OnEventType = true
	default:
		return nil, invalid("filter names neither stream identifier nor event type")
	}
	out.Prefixes = expr.GetPrefix()
	if n := len(expr.GetRegex()); n > maxRegex {
		return nil, invalid("filter regex is %d bytes, over the limit of %d (--max-filter-regex)", n, maxRegex)
	}
	if expr.GetRegex() != "" {
		re, err := regexp.Compile(expr.GetRegex())
		if err != nil {
			return nil, invalid("filter regex %q: %v", expr.GetRegex(), err)
		}
		out.Regex = re
	}
	if len(out.Prefixes) == 0 && out.Regex == nil {
		return nil, invalid("filter has neither prefixes nor a regex")
	}
	return out, nil
}

// maxAppendSizeExceeded is KurrentDB's answer to an Append over its
// maximum append size: InvalidArgument with its message, and the exception
// and the limit as trailers.
func maxAppendSizeExceeded(ctx context.Context, limit int) error {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(esdbwire.TrailerException, esdbwire.ExceptionMaxAppendSize,
		esdbwire.TrailerMaxAppendSize, strconv.Itoa(limit)))
	return status.Error(codes.InvalidArgument, esdbwire.MaxAppendSizeMessage(limit))
}

// legacyExpectedVersion is an expected revision as EventStoreDB writes it
// in its errors: a revision, or -1 for no stream, -2 for any, -4 for a
// stream that exists (ExpectedVersion).
func legacyExpectedVersion(e eslog.Expected) int64 {
	switch e.Kind {
	case eslog.ExpectRevision:
		return int64(e.Revision)
	case eslog.ExpectNoStream:
		return -1
	case eslog.ExpectStreamExists:
		return -4
	default:
		return -2
	}
}

// operation names the call a context serves, as EventStoreDB's error
// messages do ("Delete", "Tombstone").
func operation(ctx context.Context) string {
	method, _ := grpc.Method(ctx)
	if i := strings.LastIndexByte(method, '/'); i >= 0 {
		return method[i+1:]
	}
	return "Operation"
}

// toStatus maps store errors to the statuses and trailers the clients expect.
func toStatus(ctx context.Context, err error) error {
	var deleted *eslog.StreamDeletedError
	var wrong *eslog.WrongExpectedVersionError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &deleted):
		_ = grpc.SetTrailer(ctx, metadata.Pairs("exception", "stream-deleted", "stream-name", deleted.Stream))
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.As(err, &wrong):
		// RpcExceptions.WrongExpectedVersion: the stream's name, and both
		// versions as numbers (the Node client reads them as such, and
		// never settles without them).
		expected := legacyExpectedVersion(wrong.Expected)
		_ = grpc.SetTrailer(ctx, metadata.Pairs(esdbwire.TrailerException, "wrong-expected-version",
			"stream-name", wrong.Stream,
			"expected-version", strconv.FormatInt(expected, 10), "actual-version", strconv.FormatInt(wrong.Current, 10)))
		return status.Errorf(codes.FailedPrecondition, "%s failed due to WrongExpectedVersion. Stream: %s, Expected version: %d, Actual version: %d",
			operation(ctx), wrong.Stream, expected, wrong.Current)
	default:
		return storeStatus(err).Err()
	}
}

// storeStatus maps a store error that needs no trailer to its status.
func storeStatus(err error) *status.Status {
	switch {
	case errors.Is(err, eslog.ErrInvalidRequest):
		return status.New(codes.InvalidArgument, err.Error())
	case errors.Is(err, eslog.ErrClosed):
		return status.New(codes.Unavailable, err.Error())
	case errors.Is(err, eslog.ErrNoSpace):
		return status.New(codes.ResourceExhausted, err.Error())
	case errors.Is(err, eslog.ErrWriteFailed):
		return status.New(codes.Unavailable, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.New(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.New(codes.Canceled, err.Error())
	default:
		if st, ok := status.FromError(err); ok {
			return st
		}
		return status.New(codes.Internal, err.Error())
	}
}
