package esdbserver

import (
	"context"
	"io"
	"math"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
	"github.com/sagaengine/saga/adapters/esdbwire"
)

// maxBatchInFlight bounds the appends one BatchAppend call has queued and
// not yet answered. Past it the call stops reading, and gRPC's flow control
// holds the client back.
const maxBatchInFlight = 1024

// maxBatchChunked bounds the appends of one BatchAppend call that arrived in
// chunks (is_final unset) and are not complete yet. One more ends the call
// with ResourceExhausted.
const maxBatchChunked = 64

// chunkedAppend is one append of a BatchAppend call while its chunks arrive.
type chunkedAppend struct {
	// corr is the correlation id as the client sent it, for the answer.
	corr esdbwire.CorrBytes
	name string
	opts esdbwire.Options
	// expectedField and revision are the expected revision as sent, which
	// the answer echoes.
	expectedField protowire.Number
	revision      uint64
	expected      eslog.Expected
	events        []eslog.ProposedEvent
	size          int
	// err, once set, is the append's answer: its later chunks are read and
	// dropped.
	err error
}

// batchOutcome is one append of a BatchAppend call, queued or refused, in
// the order the call's final chunks arrived.
type batchOutcome struct {
	append *chunkedAppend
	queued *eslog.QueuedAppend
}

// BatchAppend serves EventStoreDB's pipelined append: one long-lived call
// carries many appends, to any streams, each named by a correlation id and
// answered under it as soon as its group commit is durable. Each append gets
// what Append gives: the same validation, limits, permissions, expected
// revision checks and idempotent retries, and an acknowledgement only after
// fsync. Appends arriving together are queued together and so share a group
// commit. An append may come in chunks: every request with is_final unset
// adds events to it, the first one carrying the options, and the final one
// commits it; an append never finished when the client closes its side is
// answered with InvalidArgument. A request with no correlation id cannot be
// answered and ends the call with InvalidArgument.
func (s *streamsService) BatchAppend(srv streams.Streams_BatchAppendServer) error {
	if s.cfg.DisableBatchAppend {
		return status.Error(codes.Unimplemented, "BatchAppend is disabled on this server (Config.DisableBatchAppend); use Append")
	}
	ctx := srv.Context()
	answer := &esdbwire.Encoded{}
	out := make(chan batchOutcome, maxBatchInFlight)
	done := make(chan struct{})
	defer close(done)
	received := make(chan error, 1)
	go func() {
		received <- s.receiveBatch(ctx, srv, out, done)
		close(out)
	}()
	for {
		select {
		case o, ok := <-out:
			if !ok {
				return <-received
			}
			if err := sendAnswer(ctx, srv, answer, o); err != nil {
				return err
			}
		case <-s.closing:
			return s.closeBatch(ctx, srv, answer, out, received)
		}
	}
}

// closeBatch answers the appends already queued when the server shuts down
// and ends the call with Unavailable. An append that arrives meanwhile may
// be committed unanswered: the client retries it, idempotently, as any
// append whose answer it did not get.
func (s *streamsService) closeBatch(ctx context.Context, srv streams.Streams_BatchAppendServer, answer *esdbwire.Encoded, out <-chan batchOutcome, received <-chan error) error {
	for {
		select {
		case o, ok := <-out:
			if !ok {
				return <-received
			}
			if err := sendAnswer(ctx, srv, answer, o); err != nil {
				return err
			}
		default:
			return status.Error(codes.Unavailable, "server shutting down")
		}
	}
}

// receiveBatch reads the call's requests and queues each finished append,
// in order, until the client closes its side or the call breaks.
func (s *streamsService) receiveBatch(ctx context.Context, srv streams.Streams_BatchAppendServer, out chan<- batchOutcome, done <-chan struct{}) error {
	emit := func(o batchOutcome) bool {
		select {
		case out <- o:
			return true
		case <-done:
			return false
		}
	}
	user, secure := ctx.Value(userKey{}).(User)
	chunked := map[uuid.UUID]*chunkedAppend{}
	buffered := 0
	req := &esdbwire.Request{}
	for n := 1; ; n++ {
		err := srv.RecvMsg(req)
		if err == io.EOF {
			for _, a := range chunked {
				a.err = invalid("append to %s ended without its final chunk (is_final)", a.name)
				if !emit(batchOutcome{append: a}) {
					return nil
				}
			}
			return nil
		}
		if err != nil {
			return err
		}
		if req.CorrErr != nil {
			return invalid("batch append request %d has no valid correlation id, so it cannot be answered: %v", n, status.Convert(req.CorrErr).Message())
		}
		id := req.CorrID
		a, open := chunked[id]
		if !open {
			a = s.startBatchAppend(req, user, secure)
		}
		others := buffered
		if open {
			others -= a.size
		}
		if a.err == nil {
			s.addChunk(a, req.Events, others)
		}
		if a.err != nil {
			// A refused append holds nothing while its last chunks arrive.
			a.events, a.size = nil, 0
		}
		if !req.IsFinal {
			if !open {
				if len(chunked) >= maxBatchChunked {
					return status.Errorf(codes.ResourceExhausted, "more than %d appends sent in chunks are open at once on this call; finish one (is_final) first", maxBatchChunked)
				}
				chunked[id] = a
			}
			buffered = others + a.size
			continue
		}
		if open {
			delete(chunked, id)
		}
		buffered = others
		o := batchOutcome{append: a}
		if a.err == nil && expired(&a.opts) {
			a.err = status.Error(codes.DeadlineExceeded, "the append's deadline passed before it reached the server; nothing was written")
		}
		if a.err == nil {
			o.queued = s.store.QueueAppend(ctx, a.name, a.expected, a.events)
		}
		if !emit(o) {
			return nil
		}
	}
}

// startBatchAppend reads the options of an append's first request and
// checks the caller may write its stream.
func (s *streamsService) startBatchAppend(req *esdbwire.Request, user User, secure bool) *chunkedAppend {
	a := &chunkedAppend{corr: req.Corr, opts: req.Opts}
	if !req.HasOpts {
		a.err = invalid("the first request of an append must carry options")
		return a
	}
	a.expectedField, a.revision = a.opts.ExpectedField, a.opts.Revision
	if a.name = a.opts.Stream; a.name == "" {
		a.err = invalid("stream name is empty")
		return a
	}
	if secure && !user.Admin() && systemStream(a.name) {
		a.err = denied(user, "write system stream "+a.name)
		return a
	}
	switch a.expectedField {
	case esdbwire.ExpectStreamPosition:
		a.expected = eslog.Revision(a.revision)
	case esdbwire.ExpectNoStream:
		a.expected = eslog.NoStreamExpected
	case esdbwire.ExpectStreamExists:
		a.expected = eslog.StreamExists
	default:
		a.expected = eslog.Any
	}
	return a
}

// addChunk converts a chunk's events with the checks and limits of Append;
// buffered is what the call's other unfinished appends hold.
func (s *streamsService) addChunk(a *chunkedAppend, msgs []esdbwire.Event, buffered int) {
	if a.events == nil {
		a.events = make([]eslog.ProposedEvent, 0, len(msgs))
	}
	for i := range msgs {
		e, err := proposedEvent(&msgs[i])
		if err != nil {
			a.err = err
			return
		}
		size := len(e.Data) + len(e.Metadata)
		if size > s.cfg.MaxEventSize {
			a.err = invalid("event %s is %d bytes, over the limit of %d", uuid.UUID(e.ID), size, s.cfg.MaxEventSize)
			return
		}
		if a.size += size; a.size > s.cfg.MaxAppendSize {
			// The whole append's size, across its chunks, as KurrentDB
			// counts it.
			a.err = &maxAppendSizeError{limit: s.cfg.MaxAppendSize}
			return
		}
		if buffered+a.size > s.cfg.MaxAppendSize {
			a.err = status.Errorf(codes.ResourceExhausted, "this call's unfinished chunked appends hold over %d bytes; finish them first", s.cfg.MaxAppendSize)
			return
		}
		a.events = append(a.events, e)
	}
}

// expired reports whether an append's deadline, if it names one, has
// passed. The deadline is checked when the append arrives: once queued, an
// append is committed.
// A duration (the other form of deadline) is relative to when the client
// sent the request, which the server cannot know better than by its
// arrival: never expired.
func expired(o *esdbwire.Options) bool {
	return o.HasDeadline && time.Now().After(o.Deadline)
}

// sendAnswer sends one append's answer once it is durable or refused. A
// call's answers are sent one at a time, through the same answer: gRPC has
// encoded it when SendMsg returns.
func sendAnswer(ctx context.Context, srv streams.Streams_BatchAppendServer, answer *esdbwire.Encoded, o batchOutcome) error {
	var res eslog.WriteResult
	err := o.append.err
	if o.queued != nil {
		res, err = o.queued.Wait(ctx)
	}
	answer.B = batchResponse(o.append, res, err)
	return srv.SendMsg(answer)
}

// maxAppendSizeError refuses an append over the maximum append size.
type maxAppendSizeError struct{ limit int }

func (e *maxAppendSizeError) Error() string { return esdbwire.MaxAppendSizeMessage(e.limit) }

// batchStatus maps an append's error to the status BatchAppend answers with,
// as EventStoreDB's Status does: its code, message and detail for a wrong
// expected version, a deleted stream and an append over the maximum size;
// for the rest, the code Append's call would end with and EventStoreDB's
// detail message.
func batchStatus(err error) *status.Status {
	var wrong *eslog.WrongExpectedVersionError
	var deleted *eslog.StreamDeletedError
	var tooLarge *maxAppendSizeError
	var detail protoadapt.MessageV1
	var st *status.Status
	switch {
	case errors.As(err, &tooLarge):
		// KurrentDB's Status.MaximumAppendSizeExceeded, message included.
		st = status.New(codes.InvalidArgument, "MaximumAppendSizeExceeded")
		detail = protoadapt.MessageV1Of(&shared.MaximumAppendSizeExceeded{MaxAppendSize: uint32(min(tooLarge.limit, math.MaxUint32))})
	case errors.As(err, &wrong):
		// EventStoreDB's Status.WrongExpectedVersion: AlreadyExists, named
		// by its message, told by its detail.
		st = status.New(codes.AlreadyExists, "WrongExpectedVersion")
		w := &shared.WrongExpectedVersion{}
		if wrong.Current == eslog.NoStream {
			w.CurrentStreamRevisionOption = &shared.WrongExpectedVersion_CurrentNoStream{CurrentNoStream: &emptypb.Empty{}}
		} else {
			w.CurrentStreamRevisionOption = &shared.WrongExpectedVersion_CurrentStreamRevision{CurrentStreamRevision: uint64(wrong.Current)}
		}
		switch wrong.Expected.Kind {
		case eslog.ExpectNoStream:
			w.ExpectedStreamPositionOption = &shared.WrongExpectedVersion_ExpectedNoStream{ExpectedNoStream: &emptypb.Empty{}}
		case eslog.ExpectStreamExists:
			w.ExpectedStreamPositionOption = &shared.WrongExpectedVersion_ExpectedStreamExists{ExpectedStreamExists: &emptypb.Empty{}}
		case eslog.ExpectRevision:
			w.ExpectedStreamPositionOption = &shared.WrongExpectedVersion_ExpectedStreamPosition{ExpectedStreamPosition: wrong.Expected.Revision}
		default:
			w.ExpectedStreamPositionOption = &shared.WrongExpectedVersion_ExpectedAny{ExpectedAny: &emptypb.Empty{}}
		}
		detail = protoadapt.MessageV1Of(w)
	case errors.As(err, &deleted):
		// EventStoreDB's Status.StreamDeleted.
		st = status.New(codes.NotFound, "StreamDeleted")
		detail = protoadapt.MessageV1Of(&shared.StreamDeleted{StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(deleted.Stream)}})
	default:
		st = storeStatus(err)
		switch st.Code() {
		case codes.InvalidArgument:
			detail = protoadapt.MessageV1Of(&shared.BadRequest{Message: st.Message()})
		case codes.PermissionDenied:
			detail = protoadapt.MessageV1Of(&shared.AccessDenied{})
		case codes.DeadlineExceeded:
			detail = protoadapt.MessageV1Of(&shared.Timeout{})
		}
	}
	if detail != nil {
		if withDetail, err := st.WithDetails(detail); err == nil {
			st = withDetail
		}
	}
	return st
}

// proposedEvent converts an event with Append's checks (toProposed's).
func proposedEvent(e *esdbwire.Event) (eslog.ProposedEvent, error) {
	if e.Err != nil {
		return eslog.ProposedEvent{}, e.Err
	}
	if e.Type == "" {
		return eslog.ProposedEvent{}, invalid("event %s has no %q metadata", uuid.UUID(e.ID), metaType)
	}
	contentType := e.ContentType
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	return eslog.ProposedEvent{ID: e.ID, Type: e.Type, ContentType: contentType, Metadata: e.Custom, Data: e.Data}, nil
}

// batchResponse encodes the answer to one append: success with the
// stream's revision and the position, or an error status whose details say
// what happened, as EventStoreDB's own (WrongExpectedVersion, StreamDeleted,
// AccessDenied, BadRequest, Timeout). It echoes the correlation id as sent,
// the stream and the expected revision.
func batchResponse(a *chunkedAppend, res eslog.WriteResult, err error) []byte {
	answer := esdbwire.Answer{Corr: a.corr.Bytes(), Stream: a.name, ExpectedField: a.expectedField, Revision: a.revision}
	if err != nil {
		answer.Error, _ = proto.Marshal(batchStatus(err).Proto())
		if answer.Error == nil {
			answer.Error = []byte{}
		}
	} else {
		answer.NoStream = res.Revision == eslog.NoStream
		answer.CurrentRevision = uint64(res.Revision)
		answer.Commit, answer.Prepare = res.Position, res.Position
	}
	return answer.Encode()
}
