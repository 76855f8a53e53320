package esdbserver

import (
	"encoding/binary"
	"io"
	"strconv"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/persistent"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// defaultPersistentBuffer is how many messages a consumer has in flight
// when it names no buffer size.
const defaultPersistentBuffer = 10

// Read connects a consumer to a group: the first message names the group,
// then the server sends events and the client acks and nacks them.
func (s *persistentService) Read(srv persistent.PersistentSubscriptions_ReadServer) error {
	first, err := srv.Recv()
	if err == io.EOF {
		return invalid("read carried no messages")
	}
	if err != nil {
		return err
	}
	opts := first.GetOptions()
	if opts == nil {
		return invalid("the first read message must carry options")
	}
	stream, err := streamOrAll(opts.GetStreamIdentifier())
	if err != nil {
		return err
	}
	if err := s.authorize(srv.Context(), stream); err != nil {
		return err
	}
	g, err := s.group(stream, opts.GetGroupName())
	if err != nil {
		return err
	}
	if n := s.consumers.Add(1); n > int64(s.cfg.MaxSubscriptions) {
		s.consumers.Add(-1)
		return status.Errorf(codes.ResourceExhausted,
			"the server already serves %d persistent-subscription consumers, its limit (--max-subscriptions); close one or retry later", s.cfg.MaxSubscriptions)
	}
	defer s.consumers.Add(-1)
	c := &psConsumer{slots: int(opts.GetBufferSize()), notify: make(chan struct{}, 1), dropped: make(chan struct{})}
	if c.slots <= 0 {
		c.slots = defaultPersistentBuffer
	}
	if p, ok := peer.FromContext(srv.Context()); ok {
		c.from = p.Addr.String()
	}
	if err := g.join(c); err != nil {
		return err
	}
	defer g.leave(c)
	if err := srv.Send(&persistent.ReadResp{Content: &persistent.ReadResp_SubscriptionConfirmation_{
		SubscriptionConfirmation: &persistent.ReadResp_SubscriptionConfirmation{SubscriptionId: g.cfg.key()},
	}}); err != nil {
		return err
	}
	uuidAsString := opts.GetUuidOption().GetString_() != nil
	recvErr := make(chan error, 1)
	go func() {
		for {
			msg, err := srv.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			switch {
			case msg.GetAck() != nil:
				g.ack(c, messageIDs(msg.GetAck().GetIds()))
			case msg.GetNack() != nil:
				n := msg.GetNack()
				g.nack(c, messageIDs(n.GetIds()), n.GetAction(), n.GetReason())
			}
		}
	}()
	for {
		select {
		case <-c.notify:
			evs, retries := g.take(c)
			for i := range evs {
				if err := srv.Send(persistentEvent(&evs[i], retries[i], uuidAsString)); err != nil {
					return err
				}
			}
		case err := <-recvErr:
			if err == io.EOF {
				return nil
			}
			return err
		case <-c.dropped:
			return c.dropErr
		case <-srv.Context().Done():
			return srv.Context().Err()
		case <-s.closing:
			return status.Error(codes.Unavailable, "server shutting down")
		}
	}
}

func messageIDs(ids []*shared.UUID) [][16]byte {
	out := make([][16]byte, 0, len(ids))
	for _, id := range ids {
		if u, err := parseUUID(id); err == nil {
			out = append(out, u)
		}
	}
	return out
}

func protoUUID(id [16]byte, asString bool) *shared.UUID {
	if asString {
		return &shared.UUID{Value: &shared.UUID_String_{String_: string(appendUUIDString(nil, id))}}
	}
	return &shared.UUID{Value: &shared.UUID_Structured_{Structured: &shared.UUID_Structured{
		MostSignificantBits:  int64(binary.BigEndian.Uint64(id[:8])),
		LeastSignificantBits: int64(binary.BigEndian.Uint64(id[8:])),
	}}}
}

func persistentEvent(e *eslog.RecordedEvent, retries int32, uuidAsString bool) *persistent.ReadResp {
	return &persistent.ReadResp{Content: &persistent.ReadResp_Event{Event: &persistent.ReadResp_ReadEvent{
		Event: &persistent.ReadResp_ReadEvent_RecordedEvent{
			Id:               protoUUID(e.ID, uuidAsString),
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(e.Stream)},
			StreamRevision:   e.Revision,
			PreparePosition:  e.Position,
			CommitPosition:   e.Position,
			Metadata: map[string]string{
				metaType: e.Type, metaContentType: e.ContentType, metaCreated: strconv.FormatInt(e.Created/100, 10),
			},
			CustomMetadata: e.Metadata,
			Data:           e.Data,
		},
		Position: &persistent.ReadResp_ReadEvent_CommitPosition{CommitPosition: e.Position},
		Count:    &persistent.ReadResp_ReadEvent_RetryCount{RetryCount: retries},
	}}}
}
