package esdbserver

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
	"github.com/sagaengine/saga/adapters/esdbwire"
)

// pageSize is how many events one read of the store fetches.
const pageSize = 2048

// defaultCheckpointWindow is the filter window EventStoreDB uses when the
// client names none.
const defaultCheckpointWindow = 32

type streamsService struct {
	streams.UnimplementedStreamsServer
	store   *eslog.Store
	cfg     *Config
	closing <-chan struct{}
	// subscriptions counts the subscriptions being served.
	subscriptions atomic.Int64
}

// Append reads the options and every proposed event before writing, so a
// malformed or oversized request writes nothing.
func (s *streamsService) Append(srv streams.Streams_AppendServer) error {
	ctx := srv.Context()
	first, err := srv.Recv()
	if err == io.EOF {
		return invalid("append carried no messages")
	}
	if err != nil {
		return err
	}
	opts := first.GetOptions()
	if opts == nil {
		return invalid("the first append message must carry options")
	}
	name, err := streamName(opts.GetStreamIdentifier())
	if err != nil {
		return err
	}
	expected := expectedFrom(opts.GetExpectedStreamRevision())
	var events []eslog.ProposedEvent
	total := 0
	for {
		msg, err := srv.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		proposed := msg.GetProposedMessage()
		if proposed == nil {
			return invalid("append message %d is not a proposed event", len(events)+1)
		}
		e, err := toProposed(proposed)
		if err != nil {
			return err
		}
		size := len(e.Data) + len(e.Metadata)
		if size > s.cfg.MaxEventSize {
			return invalid("event %s is %d bytes, over the limit of %d", uuid.UUID(e.ID), size, s.cfg.MaxEventSize)
		}
		if total += size; total > s.cfg.MaxAppendSize {
			return maxAppendSizeExceeded(ctx, s.cfg.MaxAppendSize)
		}
		events = append(events, e)
	}
	res, err := s.store.Append(ctx, name, expected, events)
	var wrong *eslog.WrongExpectedVersionError
	if errors.As(err, &wrong) {
		return srv.SendAndClose(&streams.AppendResp{Result: wrongExpected(wrong)})
	}
	if err != nil {
		return toStatus(ctx, err)
	}
	success := &streams.AppendResp_Success{
		PositionOption: &streams.AppendResp_Success_Position{Position: &streams.AppendResp_Position{
			CommitPosition: res.Position, PreparePosition: res.Position,
		}},
	}
	if res.Revision == eslog.NoStream {
		success.CurrentRevisionOption = &streams.AppendResp_Success_NoStream{NoStream: &shared.Empty{}}
	} else {
		success.CurrentRevisionOption = &streams.AppendResp_Success_CurrentRevision{CurrentRevision: uint64(res.Revision)}
	}
	return srv.SendAndClose(&streams.AppendResp{Result: &streams.AppendResp_Success_{Success: success}})
}

func wrongExpected(w *eslog.WrongExpectedVersionError) *streams.AppendResp_WrongExpectedVersion_ {
	out := &streams.AppendResp_WrongExpectedVersion{}
	if w.Current == eslog.NoStream {
		out.CurrentRevisionOption = &streams.AppendResp_WrongExpectedVersion_CurrentNoStream{CurrentNoStream: &shared.Empty{}}
		out.CurrentRevisionOption_20_6_0 = &streams.AppendResp_WrongExpectedVersion_NoStream_20_6_0{NoStream_20_6_0: &shared.Empty{}}
	} else {
		out.CurrentRevisionOption = &streams.AppendResp_WrongExpectedVersion_CurrentRevision{CurrentRevision: uint64(w.Current)}
		out.CurrentRevisionOption_20_6_0 = &streams.AppendResp_WrongExpectedVersion_CurrentRevision_20_6_0{CurrentRevision_20_6_0: uint64(w.Current)}
	}
	switch w.Expected.Kind {
	case eslog.ExpectNoStream:
		out.ExpectedRevisionOption = &streams.AppendResp_WrongExpectedVersion_ExpectedNoStream{ExpectedNoStream: &shared.Empty{}}
	case eslog.ExpectStreamExists:
		out.ExpectedRevisionOption = &streams.AppendResp_WrongExpectedVersion_ExpectedStreamExists{ExpectedStreamExists: &shared.Empty{}}
	case eslog.ExpectRevision:
		out.ExpectedRevisionOption = &streams.AppendResp_WrongExpectedVersion_ExpectedRevision{ExpectedRevision: w.Expected.Revision}
	default:
		out.ExpectedRevisionOption = &streams.AppendResp_WrongExpectedVersion_ExpectedAny{ExpectedAny: &shared.Empty{}}
	}
	return &streams.AppendResp_WrongExpectedVersion_{WrongExpectedVersion: out}
}

// Delete soft-deletes a stream.
func (s *streamsService) Delete(ctx context.Context, req *streams.DeleteReq) (*streams.DeleteResp, error) {
	opts := req.GetOptions()
	if opts == nil {
		return nil, invalid("delete carries no options")
	}
	name, err := streamName(opts.GetStreamIdentifier())
	if err != nil {
		return nil, err
	}
	res, err := s.store.Delete(ctx, name, expectedFrom(opts.GetExpectedStreamRevision()))
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	// The client reads the position without a nil check: always send one.
	return &streams.DeleteResp{PositionOption: &streams.DeleteResp_Position_{Position: &streams.DeleteResp_Position{
		CommitPosition: res.Position, PreparePosition: res.Position,
	}}}, nil
}

// Tombstone deletes a stream for good.
func (s *streamsService) Tombstone(ctx context.Context, req *streams.TombstoneReq) (*streams.TombstoneResp, error) {
	opts := req.GetOptions()
	if opts == nil {
		return nil, invalid("tombstone carries no options")
	}
	name, err := streamName(opts.GetStreamIdentifier())
	if err != nil {
		return nil, err
	}
	res, err := s.store.Tombstone(ctx, name, expectedFrom(opts.GetExpectedStreamRevision()))
	if err != nil {
		return nil, toStatus(ctx, err)
	}
	return &streams.TombstoneResp{PositionOption: &streams.TombstoneResp_Position_{Position: &streams.TombstoneResp_Position{
		CommitPosition: res.Position, PreparePosition: res.Position,
	}}}, nil
}

// Read serves plain reads and catch-up subscriptions, of one stream or $all.
func (s *streamsService) Read(req *streams.ReadReq, srv streams.Streams_ReadServer) error {
	opts := req.GetOptions()
	if opts == nil {
		return invalid("read carries no options")
	}
	r := &reader{store: s.store, srv: srv, closing: s.closing, cfg: s.cfg}
	r.enc.uuidAsString = opts.GetUuidOption().GetString_() != nil
	backwards := opts.GetReadDirection() == streams.ReadReq_Options_Backwards
	filter, err := toFilter(opts.GetFilter(), s.cfg.MaxFilterRegex)
	if err != nil {
		return err
	}
	var subscribe bool
	var count uint64
	switch c := opts.GetCountOption().(type) {
	case *streams.ReadReq_Options_Subscription:
		subscribe = true
	case *streams.ReadReq_Options_Count:
		count = c.Count
	default:
		return invalid("read names neither a count nor a subscription")
	}
	if subscribe {
		if n := s.subscriptions.Add(1); n > int64(s.cfg.MaxSubscriptions) {
			s.subscriptions.Add(-1)
			return status.Errorf(codes.ResourceExhausted,
				"the server already serves %d subscriptions, its limit (--max-subscriptions); close one or retry later", s.cfg.MaxSubscriptions)
		}
		defer s.subscriptions.Add(-1)
	}
	switch so := opts.GetStreamOption().(type) {
	case *streams.ReadReq_Options_Stream:
		name, err := streamName(so.Stream.GetStreamIdentifier())
		if err != nil {
			return err
		}
		if subscribe {
			return toStatus(srv.Context(), r.subscribeStream(name, so.Stream))
		}
		return toStatus(srv.Context(), r.readStream(name, so.Stream, backwards, count))
	case *streams.ReadReq_Options_All:
		if subscribe {
			window := uint64(defaultCheckpointWindow)
			if m := opts.GetFilter().GetMax(); m > 0 {
				window = uint64(m)
			}
			window *= uint64(max(1, opts.GetFilter().GetCheckpointIntervalMultiplier()))
			window = min(window, uint64(s.cfg.MaxSearchWindow))
			return toStatus(srv.Context(), r.subscribeAll(so.All, filter, window))
		}
		return toStatus(srv.Context(), r.readAll(so.All, backwards, count, filter))
	default:
		return invalid("read names neither a stream nor $all")
	}
}

type reader struct {
	store   *eslog.Store
	cfg     *Config
	closing <-chan struct{}
	srv     streams.Streams_ReadServer
	enc     eventEncoder
	// msg carries each encoded event to SendMsg, which is done with it
	// when it returns (the server sets no stats handler and no tracing,
	// which could keep it).
	msg encodedMsg
}

// limits bounds one page of a read that still wants count events: at most
// pageSize events, MaxReadBytes of them, and, with a filter, MaxSearchWindow
// examined.
func (r *reader) limits(count uint64, filter *eslog.Filter) eslog.ReadLimits {
	lim := eslog.ReadLimits{Events: int(min(count, pageSize)), Bytes: r.cfg.MaxReadBytes}
	if filter != nil {
		lim.Examine = r.cfg.MaxSearchWindow
	}
	return lim
}

func (r *reader) send(events []eslog.RecordedEvent) error {
	r.enc.reserve(events)
	for i := range events {
		r.msg.b = r.enc.encode(&events[i])
		// Unwrapped, as Send's errors: toStatus keeps a status as it is.
		if err := r.srv.SendMsg(&r.msg); err != nil {
			return err
		}
	}
	return nil
}

func (r *reader) readStream(name string, o *streams.ReadReq_Options_StreamOptions, backwards bool, count uint64) error {
	dir := eslog.Forwards
	if backwards {
		dir = eslog.Backwards
	}
	from, fromEnd := o.GetRevision(), o.GetEnd() != nil
	for count > 0 {
		page, err := r.store.ReadStreamContext(r.srv.Context(), name, dir, from, fromEnd, r.limits(count, nil))
		if errors.Is(err, eslog.ErrStreamNotFound) {
			return r.srv.Send(&streams.ReadResp{Content: &streams.ReadResp_StreamNotFound_{StreamNotFound: &streams.ReadResp_StreamNotFound{
				StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(name)},
			}}})
		}
		if err != nil {
			return err
		}
		if err := r.send(page.Events); err != nil {
			return err
		}
		count -= uint64(len(page.Events))
		if page.End || page.Examined == 0 || (backwards && page.Last == 0) {
			return nil
		}
		fromEnd = false
		if backwards {
			from = page.Last - 1
		} else {
			from = page.Last + 1
		}
	}
	return nil
}

func allFrom(o *streams.ReadReq_Options_AllOptions) eslog.AllFrom {
	switch {
	case o.GetEnd() != nil:
		return eslog.AllFrom{FromEnd: true}
	case o.GetPosition() != nil:
		return eslog.AllFrom{Position: o.GetPosition().GetCommitPosition()}
	default:
		return eslog.AllFrom{}
	}
}

func (r *reader) readAll(o *streams.ReadReq_Options_AllOptions, backwards bool, count uint64, filter *eslog.Filter) error {
	dir := eslog.Forwards
	if backwards {
		dir = eslog.Backwards
	}
	from := allFrom(o)
	for count > 0 {
		page, err := r.store.ReadAllContext(r.srv.Context(), dir, from, r.limits(count, filter), filter)
		if err != nil {
			return err
		}
		if err := r.send(page.Events); err != nil {
			return err
		}
		count -= uint64(len(page.Events))
		if page.End || page.Examined == 0 {
			return nil
		}
		if backwards {
			from = eslog.AllFrom{Position: page.Last}
		} else {
			from = eslog.AllFrom{Position: page.Last + 1}
		}
	}
	return nil
}

func (r *reader) confirm() error {
	return r.srv.Send(&streams.ReadResp{Content: &streams.ReadResp_Confirmation{
		Confirmation: &streams.ReadResp_SubscriptionConfirmation{SubscriptionId: uuid.NewString()},
	}})
}

// caughtUp tells the client its subscription has caught up, as KurrentDB
// 24.10 and later do: with the server's time, which KurrentDB-Client-Go
// waits for, and the checkpoint c names.
func (r *reader) caughtUp(c esdbwire.CaughtUp) error {
	c.Time = time.Now()
	return r.srv.SendMsg(&esdbwire.Encoded{B: c.Encode()})
}

// idle lets go of the encoder's buffer while the reader waits for new
// events, so that many idle subscriptions hold no buffers.
func (r *reader) idle() {
	r.enc.buf = nil
}

// wait blocks until the store commits again or the client goes away.
func (r *reader) wait(changed <-chan struct{}) error {
	select {
	case <-changed:
		return nil
	case <-r.srv.Context().Done():
		return r.srv.Context().Err()
	case <-r.closing:
		return status.Error(codes.Unavailable, "server shutting down")
	}
}

// subscribeStream follows one stream: it reads the committed log from its
// cursor until it finds nothing new, then waits for the next commit. The
// cursor only moves past events that were sent, so the hand-over from
// catch-up to live has no gap and no duplicate. Events after the given
// revision are sent (the revision itself is not).
func (r *reader) subscribeStream(name string, o *streams.ReadReq_Options_StreamOptions) error {
	if err := r.confirm(); err != nil {
		return err
	}
	var next uint64
	switch {
	case o.GetEnd() != nil:
		next = uint64(r.store.StreamRevision(name) + 1)
	case o.GetStart() != nil:
		next = 0
	default:
		next = o.GetRevision() + 1
	}
	live := false
	for {
		page, err := r.store.ReadStreamContext(r.srv.Context(), name, eslog.Forwards, next, false, r.limits(pageSize, nil))
		if err != nil && !errors.Is(err, eslog.ErrStreamNotFound) {
			return err
		}
		if err := r.send(page.Events); err != nil {
			return err
		}
		if page.Examined > 0 {
			next = page.Last + 1
		}
		if !page.End {
			continue
		}
		if !live {
			live = true
			// The last revision sent, or the one the client subscribed
			// after; none from the start of an empty stream.
			c := esdbwire.CaughtUp{Revision: next - 1, HasRevision: next > 0}
			if err := r.caughtUp(c); err != nil {
				return err
			}
		}
		r.idle()
		if err := r.wait(page.Changed); err != nil {
			return err
		}
	}
}

// subscribeAll follows $all from a position (exclusive), filtered, with a
// checkpoint every window examined events when a filter is set and whenever
// it catches up.
func (r *reader) subscribeAll(o *streams.ReadReq_Options_AllOptions, filter *eslog.Filter, window uint64) error {
	if err := r.confirm(); err != nil {
		return err
	}
	from := eslog.AllFrom{}
	switch {
	case o.GetEnd() != nil:
		from.Position = r.store.HeadPosition() + 1
	case o.GetPosition() != nil:
		from.Position = o.GetPosition().GetCommitPosition() + 1
	}
	var examined uint64
	// last is the last position examined, or the one the client subscribed
	// after; 0 (none) from the start of an empty log.
	var last uint64
	if from.Position > 0 {
		last = from.Position - 1
	}
	return followAll(r.srv.Context(), r.store, from, r.limits(pageSize, filter), filter, func(page eslog.Page) error {
		// The events are copied out when they are encoded.
		if err := r.send(page.Events); err != nil {
			return err
		}
		if page.Examined > 0 {
			last = page.Last
			examined += uint64(page.Examined)
		}
		if filter != nil && (examined >= window || (page.End && examined > 0)) {
			examined = 0
			return r.srv.Send(&streams.ReadResp{Content: &streams.ReadResp_Checkpoint_{Checkpoint: &streams.ReadResp_Checkpoint{
				CommitPosition: last, PreparePosition: last,
			}}})
		}
		return nil
	}, func() error {
		return r.caughtUp(esdbwire.CaughtUp{Commit: last, Prepare: last, HasPosition: last > 0})
	}, func(changed <-chan struct{}) error {
		r.idle()
		return r.wait(changed)
	})
}

// followAll reads $all forwards from from, page after page, as a catch-up
// subscription does: each page goes to onPage; at the first end of the
// log caughtUp is called; at each end, wait blocks until the next commit.
// A page's slice is reused for the next while catching up, and let go
// while waiting.
func followAll(ctx context.Context, store *eslog.Store, from eslog.AllFrom, lim eslog.ReadLimits, filter *eslog.Filter,
	onPage func(eslog.Page) error, caughtUp func() error, wait func(changed <-chan struct{}) error) error {
	live := false
	var events []eslog.RecordedEvent
	for {
		page, err := store.ReadAllAppend(ctx, eslog.Forwards, from, lim, filter, events)
		if err != nil {
			return err
		}
		if err := onPage(page); err != nil {
			return err
		}
		events = page.Events
		if page.Examined > 0 {
			from.Position = page.Last + 1
		}
		if !page.End {
			continue
		}
		if !live {
			live = true
			if err := caughtUp(); err != nil {
				return err
			}
		}
		events = nil
		if err := wait(page.Changed); err != nil {
			return err
		}
	}
}
