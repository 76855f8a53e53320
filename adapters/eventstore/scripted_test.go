package eventstore_test

import (
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbwire"
)

// scriptedStreams is a fake KurrentDB Streams service whose answers a test
// scripts, for what the embedded server never sends: positions with commit
// != prepare, NotLeader, system events.
type scriptedStreams struct {
	streams.UnimplementedStreamsServer
	mu    sync.Mutex
	reads []*streams.ReadReq
	// read answers the n-th Read call (from 0).
	read func(n int, req *streams.ReadReq, srv streams.Streams_ReadServer) error
	// batchAppend answers BatchAppend calls.
	batchAppend func(srv streams.Streams_BatchAppendServer) error
	// appendStream answers Append calls.
	appendStream func(srv streams.Streams_AppendServer) error
}

func (s *scriptedStreams) Read(req *streams.ReadReq, srv streams.Streams_ReadServer) error {
	s.mu.Lock()
	n := len(s.reads)
	s.reads = append(s.reads, req)
	s.mu.Unlock()
	return s.read(n, req, srv)
}

func (s *scriptedStreams) BatchAppend(srv streams.Streams_BatchAppendServer) error {
	return s.batchAppend(srv)
}

func (s *scriptedStreams) Append(srv streams.Streams_AppendServer) error {
	return s.appendStream(srv)
}

// readRequests returns the Read requests received so far.
func (s *scriptedStreams) readRequests() []*streams.ReadReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*streams.ReadReq(nil), s.reads...)
}

// startScripted serves fake on a loopback port and returns its address.
func startScripted(t *testing.T, fake streams.StreamsServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	// saga's codec, protobuf's bytes: a script may also send frames as
	// they are (esdbwire.Encoded).
	srv := grpc.NewServer(grpc.ForceServerCodecV2(esdbwire.NewCodec()))
	streams.RegisterStreamsServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// scriptedEvent is a recorded event as KurrentDB sends it in a ReadResp.
type scriptedEvent struct {
	stream          string
	typ             string
	revision        uint64
	commit, prepare uint64
	data            string
}

func (e scriptedEvent) resp() *streams.ReadResp {
	id := uuid.New()
	return &streams.ReadResp{Content: &streams.ReadResp_Event{Event: &streams.ReadResp_ReadEvent{
		Event: &streams.ReadResp_ReadEvent_RecordedEvent{
			Id:               &shared.UUID{Value: &shared.UUID_String_{String_: id.String()}},
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(e.stream)},
			StreamRevision:   e.revision, PreparePosition: e.prepare, CommitPosition: e.commit,
			Metadata: map[string]string{"type": e.typ, "content-type": "application/json",
				"created": strconv.FormatInt(time.Now().UnixNano()/100, 10)},
			Data: []byte(e.data),
		},
		Position: &streams.ReadResp_ReadEvent_CommitPosition{CommitPosition: e.commit},
	}}}
}

// after reports whether e comes after the position a subscription request
// names (everything, from the start), as KurrentDB orders $all: by commit,
// then prepare position.
func (e scriptedEvent) after(req *streams.ReadReq) bool {
	pos := req.GetOptions().GetAll().GetPosition()
	if pos == nil {
		return true
	}
	if e.commit != pos.GetCommitPosition() {
		return e.commit > pos.GetCommitPosition()
	}
	return e.prepare > pos.GetPreparePosition()
}

func confirmation() *streams.ReadResp {
	return &streams.ReadResp{Content: &streams.ReadResp_Confirmation{Confirmation: &streams.ReadResp_SubscriptionConfirmation{SubscriptionId: "scripted"}}}
}

func caughtUp() *streams.ReadResp {
	return &streams.ReadResp{Content: &streams.ReadResp_CaughtUp_{CaughtUp: &streams.ReadResp_CaughtUp{}}}
}

// subscriptionScript answers Read as a KurrentDB subscription to $all over
// events: a confirmation, the events after the requested position, and
// caught-up; dropAfter > 0 ends the n-th call (from 0) after that many
// events, as a dropped connection would.
func subscriptionScript(events []scriptedEvent, dropAfter map[int]int) func(int, *streams.ReadReq, streams.Streams_ReadServer) error {
	return func(n int, req *streams.ReadReq, srv streams.Streams_ReadServer) error {
		if err := srv.Send(confirmation()); err != nil {
			return err
		}
		sent := 0
		for _, e := range events {
			if !e.after(req) {
				continue
			}
			if drop := dropAfter[n]; drop > 0 && sent == drop {
				return errDropped
			}
			if err := srv.Send(e.resp()); err != nil {
				return err
			}
			sent++
		}
		if err := srv.Send(caughtUp()); err != nil {
			return err
		}
		<-srv.Context().Done()
		return nil
	}
}

// errDropped ends a scripted call as a dropped connection does.
var errDropped = status.Error(codes.Unavailable, "scripted: connection dropped")
