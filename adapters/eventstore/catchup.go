package eventstore

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sagaengine/saga/adapters/esdbwire"
	"github.com/sagaengine/saga/domain"
)

// allSubscriptionRequest is the request the official client sends for
// SubscribeToAll from the start, or after a position, with a stream-name
// prefix filter when prefix is set (its default search window, 32, and
// checkpoint multiplier, 1) and without links resolved.
func allSubscriptionRequest(after allPosition, prefix string) *streams.ReadReq {
	all := &streams.ReadReq_Options_AllOptions{AllOption: &streams.ReadReq_Options_AllOptions_Start{Start: &shared.Empty{}}}
	if after.set {
		all.AllOption = &streams.ReadReq_Options_AllOptions_Position{Position: &streams.ReadReq_Options_Position{
			CommitPosition: after.commit, PreparePosition: after.prepare,
		}}
	}
	opts := &streams.ReadReq_Options{
		StreamOption:  &streams.ReadReq_Options_All{All: all},
		ReadDirection: streams.ReadReq_Options_Forwards,
		CountOption:   &streams.ReadReq_Options_Subscription{Subscription: &streams.ReadReq_Options_SubscriptionOptions{}},
		FilterOption:  &streams.ReadReq_Options_NoFilter{NoFilter: &shared.Empty{}},
		UuidOption:    &streams.ReadReq_Options_UUIDOption{Content: &streams.ReadReq_Options_UUIDOption_Structured{Structured: &shared.Empty{}}},
	}
	if prefix != "" {
		opts.FilterOption = &streams.ReadReq_Options_Filter{Filter: &streams.ReadReq_Options_FilterOptions{
			Filter: &streams.ReadReq_Options_FilterOptions_StreamIdentifier{StreamIdentifier: &streams.ReadReq_Options_FilterOptions_Expression{
				Prefix: []string{prefix},
			}},
			Window:                       &streams.ReadReq_Options_FilterOptions_Max{Max: 32},
			CheckpointIntervalMultiplier: 1,
		}}
	}
	return &streams.ReadReq{Options: opts}
}

// allPosition is where a subscription to $all resumes: after the last event
// delivered, by both parts of its position as the server sent them. The
// events of a legacy transaction (EventStoreDB before v20) share their
// commit position and differ in their prepare positions: resuming from the
// commit position sent as both would skip the rest of the transaction.
type allPosition struct {
	commit, prepare uint64
	set             bool
}

// positionAfter is where a subscription from a caller's position resumes:
// both parts the commit position, all the caller keeps.
func positionAfter(from domain.SubscribeFrom) allPosition {
	after, set := from.After()
	return allPosition{commit: after, prepare: after, set: set}
}

// systemEvent reports whether e is one of the server's own events: its type
// or its stream starts with "$" (stream metadata, statistics, scavenges,
// projections' links). A subscription to $all never delivers them, as the
// official client's ExcludeSystemEventsFilter does not (it matches the type;
// the stream is checked too, for a foreign event in a system stream).
func systemEvent(e *domain.RecordedEvent) bool {
	return strings.HasPrefix(e.Type, "$") || strings.HasPrefix(e.Stream, "$")
}

// readRespKind says what a ReadResp carries, as far as SubscribeAll cares.
type readRespKind int

const (
	// respOther is skipped: fell-behind, stream positions, kinds unknown to
	// this reader, and checkpoints. A checkpoint does not move the resume
	// position: up to 23.10 a filtered subscription's checkpoint may name a
	// record it has not yet examined (24.10 fixed it), and resuming after it
	// would skip that record.
	respOther readRespKind = iota
	respConfirmation
	respEvent
	respCaughtUp
)

// readResp is a ReadResp decoded straight into what SubscribeAll delivers.
type readResp struct {
	kind readRespKind
	// event is the record at this place in $all: for a resolved link, the
	// link, not its target (recorded, and delivered, at its own place).
	event   domain.RecordedEvent
	prepare uint64
	// types holds the event types read so far on the subscription, so
	// that each event's type is not a new string: a few types recur
	// (saga's own), and a subscription delivers many events.
	types typeNames
	// stream is the stream of the event before, whose name the next event
	// shares when both come from the same append.
	stream string
}

// typeNames interns event types, up to maxTypeNames of them; past that,
// each type is a string of its own, as without it.
type typeNames map[string]string

// maxTypeNames bounds the types a subscription keeps: a store with more
// kinds of events than this costs one allocation per event, not memory.
const maxTypeNames = 256

// name returns b as a string, the same one each time b is the same.
func (t *typeNames) name(b []byte) string {
	if s, ok := (*t)[string(b)]; ok {
		return s
	}
	s := string(b)
	if *t == nil {
		*t = typeNames{}
	}
	if len(*t) < maxTypeNames {
		(*t)[s] = s
	}
	return s
}

// UnmarshalWire decodes a ReadResp by hand into r (decodeReadResp), where
// gRPC received it (esdbwire.Codec): the official client's generated types
// and map decoding cost about as much as the rest of a catch-up together.
// It keeps none of data's bytes.
func (r *readResp) UnmarshalWire(data []byte) error { return decodeReadResp(data, r) }

var _ esdbwire.Unmarshaler = (*readResp)(nil)

// Field numbers of the protocol's ReadResp and the messages within it
// (streams.proto, shared.proto).
const (
	fieldReadRespEvent        = 1
	fieldReadRespConfirmation = 2
	fieldReadRespCaughtUp     = 8
	fieldReadRespLastContent  = 9 // fell_behind, the last member of the content oneof
	fieldReadEventEvent       = 1
	fieldReadEventLink        = 2
	fieldRecordedID           = 1
	fieldRecordedStream       = 2
	fieldRecordedRevision     = 3
	fieldRecordedPrepare      = 4
	fieldRecordedCommit       = 5
	fieldRecordedMetadata     = 6
	fieldRecordedCustomMeta   = 7
	fieldRecordedData         = 8
	fieldUUIDStructured       = 1
	fieldUUIDString           = 2
	fieldStructuredMost       = 1
	fieldStructuredLeast      = 2
	fieldStreamName           = 3
	fieldMapKey               = 1
	fieldMapValue             = 2
)

var errMalformed = errors.New("malformed read response")

// fields calls each for every field of the message b, and fails on a
// malformed one.
func fields(b []byte, each func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		if err := each(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// decodeReadResp decodes a ReadResp as the official client and fromRecorded
// together would: the event's id, stream, type, revision, commit position,
// creation time, data (copied) and saga's metadata (decoded from JSON,
// empty when it is not saga's). Fields this reader does not know, beside
// the content or within it, are skipped: they change nothing it reads.
func decodeReadResp(b []byte, r *readResp) error {
	*r = readResp{types: r.types, stream: r.stream}
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num > fieldReadRespLastContent {
			return nil // not a member of the content oneof this reader knows
		}
		r.kind = respOther
		if typ != protowire.BytesType {
			return nil // first_stream_position, last_stream_position
		}
		switch num {
		case fieldReadRespConfirmation:
			r.kind = respConfirmation
		case fieldReadRespCaughtUp:
			r.kind = respCaughtUp
		case fieldReadRespEvent:
			r.kind = respEvent
			var event, link []byte
			hasEvent, hasLink := false, false
			if err := fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				switch {
				case num == fieldReadEventEvent && typ == protowire.BytesType:
					event, hasEvent = v, true
				case num == fieldReadEventLink && typ == protowire.BytesType:
					link, hasLink = v, true
				}
				return nil // the position, repeated from the record
			}); err != nil {
				return err
			}
			switch {
			case hasLink:
				return decodeRecorded(link, r)
			case hasEvent:
				return decodeRecorded(event, r)
			default:
				return errors.Wrap(errMalformed, "event without its recorded event")
			}
		}
		return nil
	})
}

// decodeRecorded decodes a RecordedEvent into r's event and prepare
// position.
func decodeRecorded(b []byte, r *readResp) error {
	e := &r.event
	var created []byte
	hasCreated := false
	var id uuid.UUID
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == fieldRecordedID && typ == protowire.BytesType:
			return decodeUUID(v, &id)
		case num == fieldRecordedStream && typ == protowire.BytesType:
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num == fieldStreamName && typ == protowire.BytesType {
					if string(v) != r.stream {
						r.stream = string(v)
					}
					e.Stream = r.stream
				}
				return nil
			})
		case num == fieldRecordedRevision && typ == protowire.VarintType:
			e.Revision = x
		case num == fieldRecordedCommit && typ == protowire.VarintType:
			e.Position = x
		case num == fieldRecordedPrepare && typ == protowire.VarintType:
			r.prepare = x
		case num == fieldRecordedMetadata && typ == protowire.BytesType:
			var key, value []byte
			if err := fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				switch {
				case num == fieldMapKey && typ == protowire.BytesType:
					key = v
				case num == fieldMapValue && typ == protowire.BytesType:
					value = v
				}
				return nil
			}); err != nil {
				return err
			}
			switch string(key) {
			case "type":
				e.Type = r.types.name(value)
			case "created":
				created, hasCreated = value, true
			}
		case num == fieldRecordedCustomMeta && typ == protowire.BytesType:
			decodeMetadata(v, &e.Metadata) // foreign events may carry none
		case num == fieldRecordedData && typ == protowire.BytesType:
			e.Data = append([]byte(nil), v...) // nil when empty, as protobuf-go has it
		}
		return nil
	})
	if err != nil {
		return err
	}
	e.ID = id.String()
	if !hasCreated {
		return errors.Wrapf(errMalformed, "event %s at %d has no creation time", e.ID, e.Position)
	}
	ticks, err := strconv.ParseInt(string(created), 10, 64)
	if err != nil {
		return errors.Wrapf(errMalformed, "event %s at %d: creation time %q", e.ID, e.Position, created)
	}
	// .NET ticks (100 ns) since the Unix epoch.
	e.Recorded = time.Unix(0, ticks*100).UTC()
	return nil
}

// decodeUUID reads either form of the protocol's UUID; a malformed string
// is the nil UUID, as the official client has it.
func decodeUUID(b []byte, id *uuid.UUID) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == fieldUUIDStructured && typ == protowire.BytesType:
			return fields(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
				switch {
				case num == fieldStructuredMost && typ == protowire.VarintType:
					binary.BigEndian.PutUint64(id[:8], x)
				case num == fieldStructuredLeast && typ == protowire.VarintType:
					binary.BigEndian.PutUint64(id[8:], x)
				}
				return nil
			})
		case num == fieldUUIDString && typ == protowire.BytesType:
			parsed, err := uuid.ParseBytes(v)
			if err != nil {
				parsed = uuid.Nil
			}
			*id = parsed
		}
		return nil
	})
}

var readStreamDesc = grpc.StreamDesc{StreamName: "Read", ServerStreams: true}

// followAll subscribes to $all on the pipeline's connection and delivers
// events and the caught-up signal to handle, moving after past each event
// delivered (both parts of its position), until the subscription breaks or
// handle fails (handlerError). It calls subscribed once the server confirms
// the subscription.
func (p *pipeline) followAll(ctx context.Context, prefix string, handle func(domain.SubscriptionItem) error, after *allPosition, subscribed func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := p.conn.Load().NewStream(ctx, &readStreamDesc, streams.Streams_Read_FullMethodName, grpc.ForceCodecV2(esdbwire.NewCodec()))
	if err != nil {
		return errors.Wrap(err, "subscribe to $all")
	}
	if err := stream.SendMsg(allSubscriptionRequest(*after, prefix)); err != nil {
		return errors.Wrap(err, "subscribe to $all")
	}
	if err := stream.CloseSend(); err != nil {
		return errors.Wrap(err, "subscribe to $all")
	}
	var r readResp
	if err := stream.RecvMsg(&r); err != nil {
		return errors.Wrap(err, "subscribe to $all")
	}
	if r.kind != respConfirmation {
		return errors.New("subscribe to $all: the server did not confirm the subscription")
	}
	subscribed()
	for {
		if err := stream.RecvMsg(&r); err != nil {
			return errors.Wrap(err, "subscription dropped")
		}
		switch r.kind {
		case respEvent:
			rec := r.event
			if !systemEvent(&rec) {
				if err := handle(domain.SubscriptionItem{Event: &rec}); err != nil {
					return handlerError{err}
				}
			}
			*after = allPosition{commit: rec.Position, prepare: r.prepare, set: true}
		case respCaughtUp:
			if err := handle(domain.SubscriptionItem{CaughtUp: true}); err != nil {
				return handlerError{err}
			}
		}
	}
}
