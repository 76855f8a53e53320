package eventstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sagaengine/saga/adapters/esdbwire"
	"github.com/sagaengine/saga/domain"
)

// TestBatchReplyDecodes: answers decode by hand, or through protobuf when
// they are not a plain success, to the same result.
func TestBatchReplyDecodes(t *testing.T) {
	id := uuid.MustParse("f47ac10b-58cc-4372-a567-0e02b2c3d479")
	corr := &shared.UUID{Value: &shared.UUID_Structured_{Structured: &shared.UUID_Structured{MostSignificantBits: int64(binary.BigEndian.Uint64(id[:8])), LeastSignificantBits: int64(binary.BigEndian.Uint64(id[8:]))}}}
	pos := &streams.BatchAppendResp_Success_Position{Position: &shared.AllStreamPosition{CommitPosition: 90, PreparePosition: 80}}
	for name, tc := range map[string]struct {
		resp *streams.BatchAppendResp
		want *esdb.WriteResult
		code esdb.ErrorCode
	}{
		"revision": {resp: &streams.BatchAppendResp{CorrelationId: corr, Result: &streams.BatchAppendResp_Success_{Success: &streams.BatchAppendResp_Success{
			CurrentRevisionOption: &streams.BatchAppendResp_Success_CurrentRevision{CurrentRevision: 7}, PositionOption: pos}},
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte("s")}, ExpectedStreamPosition: &streams.BatchAppendResp_StreamPosition{StreamPosition: 6}},
			want: &esdb.WriteResult{NextExpectedVersion: 7, CommitPosition: 90, PreparePosition: 80}},
		"no stream": {resp: &streams.BatchAppendResp{CorrelationId: corr, Result: &streams.BatchAppendResp_Success_{Success: &streams.BatchAppendResp_Success{
			CurrentRevisionOption: &streams.BatchAppendResp_Success_NoStream{NoStream: &emptypb.Empty{}}}}},
			want: &esdb.WriteResult{NextExpectedVersion: 1}},
		"string id": {resp: &streams.BatchAppendResp{CorrelationId: &shared.UUID{Value: &shared.UUID_String_{String_: id.String()}},
			Result: &streams.BatchAppendResp_Success_{Success: &streams.BatchAppendResp_Success{
				CurrentRevisionOption: &streams.BatchAppendResp_Success_CurrentRevision{CurrentRevision: 3}, PositionOption: pos}}},
			want: &esdb.WriteResult{NextExpectedVersion: 3, CommitPosition: 90, PreparePosition: 80}},
		"wrong expected version": {resp: &streams.BatchAppendResp{CorrelationId: corr, Result: &streams.BatchAppendResp_Error{Error: wrongVersion(t)}},
			code: esdb.ErrorCodeWrongExpectedVersion},
	} {
		t.Run(name, func(t *testing.T) {
			data, err := proto.Marshal(tc.resp)
			if err != nil {
				t.Fatal(err)
			}
			var r esdbwire.Reply
			if err := esdbwire.NewCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, &r); err != nil {
				t.Fatal(err)
			}
			if r.Corr != id {
				t.Fatalf("correlation id %v, want %v", r.Corr, id)
			}
			res, err := replyResult(&r)
			if tc.want != nil {
				if err != nil || res != *tc.want {
					t.Fatalf("result %+v, %v; want %+v", res, err, tc.want)
				}
				return
			}
			if e, ok := err.(*appendError); !ok || e.code != tc.code {
				t.Fatalf("error %v, want code %d", err, tc.code)
			}
		})
	}
}

func wrongVersion(t *testing.T) *rpcstatus.Status {
	t.Helper()
	st, err := status.New(codes.FailedPrecondition, "wrong").WithDetails(&shared.WrongExpectedVersion{
		CurrentStreamRevisionOption:  &shared.WrongExpectedVersion_CurrentStreamRevision{CurrentStreamRevision: 4},
		ExpectedStreamPositionOption: &shared.WrongExpectedVersion_ExpectedStreamPosition{ExpectedStreamPosition: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	return st.Proto()
}

// TestEventIDHashesInOnePiece: an event's derived id is the hash of
// stream, slot, type and data whether they fit on the stack or not.
func TestEventIDHashesInOnePiece(t *testing.T) {
	for _, size := range []int{0, 60, 490, 5000} {
		e := domain.NewEvent{Type: "StepDispatched", Data: bytes.Repeat([]byte("d"), size)}
		got, err := eventID("task-1", domain.ExpectRevision(6), 1, e)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		h.Write([]byte("task-1"))
		h.Write(binary.BigEndian.AppendUint64(nil, 8))
		h.Write([]byte(e.Type))
		h.Write(e.Data)
		var want uuid.UUID
		copy(want[:], h.Sum(nil))
		want[6], want[8] = want[6]&0x0f|0x50, want[8]&0x3f|0x80
		if got != want {
			t.Fatalf("%d bytes of data: id %v, want %v", size, got, want)
		}
	}
}

// silentStreams takes BatchAppend requests and never answers them.
type silentStreams struct {
	streams.UnimplementedStreamsServer
	received chan struct{}
}

func (s *silentStreams) BatchAppend(srv streams.Streams_BatchAppendServer) error {
	for {
		if _, err := srv.Recv(); err != nil {
			return err
		}
		s.received <- struct{}{}
	}
}

// TestPipelinedAppendDeadline: an append the server never answers fails
// with DeadlineExceeded at the connection's default deadline, and one
// whose context ends first fails with its context's error; the call stays
// usable for the next append.
func TestPipelinedAppendDeadline(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	silent := &silentStreams{received: make(chan struct{}, 16)}
	streams.RegisterStreamsServer(srv, silent)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conf, err := esdb.ParseConnectionString("esdb://" + lis.Addr().String() + "?tls=false&defaultDeadline=300")
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPipeline(conf, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.close() }()
	events := []esdb.EventData{{EventID: uuid.New(), EventType: "E", ContentType: esdb.ContentTypeJson, Data: []byte(`{}`)}}

	began := time.Now()
	_, err = p.append(context.Background(), "s", domain.ExpectAny(), events)
	if e, ok := err.(*appendError); !ok || e.code != esdb.ErrorCodeDeadlineExceeded {
		t.Fatalf("error %v, want DeadlineExceeded", err)
	}
	if waited := time.Since(began); waited < 300*time.Millisecond {
		t.Fatalf("gave up after %v, before the 300 ms deadline", waited)
	}
	<-silent.received

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-silent.received
		cancel()
	}()
	_, err = p.append(ctx, "s", domain.ExpectAny(), events)
	if e, ok := err.(*appendError); !ok || e.code != esdb.ErrorCodeUnknown || status.Code(e.err) != codes.Canceled {
		t.Fatalf("error %v, want Canceled", err)
	}
	p.mu.Lock()
	c := p.call
	p.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil || len(c.waiting) != 0 {
		t.Fatalf("call ended (%v) or still waits for %d appends", c.err, len(c.waiting))
	}
}
