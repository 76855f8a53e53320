package esdbserver

import (
	"context"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
	"github.com/sagaengine/saga/adapters/esdbwire"
)

// fakeStream stands in for a gRPC server stream: it feeds messages to the
// handler and swallows its replies.
type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	in   []*streams.AppendReq
	sent int
}

func (f *fakeStream) Context() context.Context     { return f.ctx }
func (f *fakeStream) SetHeader(metadata.MD) error  { return nil }
func (f *fakeStream) SendHeader(metadata.MD) error { return nil }
func (f *fakeStream) SetTrailer(metadata.MD)       {}
func (f *fakeStream) SendAndClose(*streams.AppendResp) error {
	f.sent++
	return nil
}
func (f *fakeStream) Send(*streams.ReadResp) error {
	f.sent++
	if f.sent > 10_000 {
		return io.ErrClosedPipe
	}
	return nil
}

// SendMsg takes the events a read encodes by hand; they must decode as
// ReadResps.
func (f *fakeStream) SendMsg(m any) error {
	if e, ok := m.(*encodedMsg); ok {
		if err := proto.Unmarshal(e.b, &streams.ReadResp{}); err != nil {
			panic(err)
		}
	}
	return f.Send(nil)
}

func (f *fakeStream) Recv() (*streams.AppendReq, error) {
	if len(f.in) == 0 {
		return nil, io.EOF
	}
	m := f.in[0]
	f.in = f.in[1:]
	return m, nil
}

// splitMessages cuts fuzz input into length-prefixed protobuf messages.
func splitMessages(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 2 && len(out) < 64 {
		n := int(binary.LittleEndian.Uint16(b))
		b = b[2:]
		n = min(n, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

func joinMessages(msgs ...proto.Message) []byte {
	var out []byte
	for _, m := range msgs {
		b, _ := proto.Marshal(m)
		out = binary.LittleEndian.AppendUint16(out, uint16(len(b)))
		out = append(out, b...)
	}
	return out
}

func newFuzzService(t testing.TB) *streamsService {
	store, err := eslog.Open(eslog.Options{Dir: t.TempDir(), MaxEventSize: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	cfg := &Config{MaxEventSize: 1 << 10, MaxAppendSize: 4 << 10}
	cfg.setDefaults()
	return &streamsService{store: store, cfg: cfg, closing: make(chan struct{})}
}

// FuzzAppend feeds arbitrary message sequences to Append: it must answer with
// a result or an error, never panic, and never write a partial append.
func FuzzAppend(f *testing.F) {
	id := &shared.UUID{Value: &shared.UUID_String_{String_: "8c5e9a3e-9a4b-4f6e-8d2a-2b1f7d0c9e11"}}
	opts := &streams.AppendReq{Content: &streams.AppendReq_Options_{Options: &streams.AppendReq_Options{
		StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte("s")}}}}
	ev := &streams.AppendReq{Content: &streams.AppendReq_ProposedMessage_{ProposedMessage: &streams.AppendReq_ProposedMessage{
		Id: id, Metadata: map[string]string{"type": "E"}, Data: []byte(`{}`)}}}
	f.Add(joinMessages(opts, ev))
	f.Add(joinMessages(ev, opts))
	f.Add(joinMessages(opts, ev, ev))
	f.Add([]byte{})
	svc := newFuzzService(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var in []*streams.AppendReq
		for _, raw := range splitMessages(data) {
			m := &streams.AppendReq{}
			if proto.Unmarshal(raw, m) != nil {
				return
			}
			in = append(in, m)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		before := svc.store.HeadPosition()
		err := svc.Append(&fakeStream{ctx: ctx, in: in})
		if err != nil && svc.store.HeadPosition() != before {
			t.Fatalf("a failed append wrote events: %v", err)
		}
	})
}

// FuzzRead feeds arbitrary read requests to Read, subscriptions included
// (they end when the context does).
func FuzzRead(f *testing.F) {
	all := &streams.ReadReq{Options: &streams.ReadReq_Options{
		StreamOption: &streams.ReadReq_Options_All{All: &streams.ReadReq_Options_AllOptions{}},
		CountOption:  &streams.ReadReq_Options_Count{Count: 10}}}
	b, _ := proto.Marshal(all)
	f.Add(b)
	sub := &streams.ReadReq{Options: &streams.ReadReq_Options{
		StreamOption: &streams.ReadReq_Options_Stream{Stream: &streams.ReadReq_Options_StreamOptions{
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte("s")}}},
		CountOption: &streams.ReadReq_Options_Subscription{Subscription: &streams.ReadReq_Options_SubscriptionOptions{}}}}
	b, _ = proto.Marshal(sub)
	f.Add(b)
	svc := newFuzzService(f)
	for i := 0; i < 5; i++ {
		_, _ = svc.store.Append(context.Background(), "s", eslog.Any, []eslog.ProposedEvent{{ID: [16]byte{byte(i + 1)}, Type: "E"}})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &streams.ReadReq{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_ = svc.Read(req, &readStream{fakeStream{ctx: ctx}})
	})
}

type readStream struct{ fakeStream }

// batchStream stands in for a BatchAppend call: it feeds requests and
// collects the answers.
type batchStream struct {
	grpc.ServerStream
	ctx  context.Context
	in   []*streams.BatchAppendReq
	sent []*streams.BatchAppendResp
}

func (f *batchStream) Context() context.Context { return f.ctx }

// Send and Recv complete the interface; BatchAppend uses SendMsg and
// RecvMsg, with its own codec.
func (f *batchStream) Send(m *streams.BatchAppendResp) error { return f.SendMsg(m) }
func (f *batchStream) Recv() (*streams.BatchAppendReq, error) {
	return nil, errors.New("BatchAppend receives with RecvMsg")
}

// SendMsg decodes an answer with protobuf, as a client would.
func (f *batchStream) SendMsg(m any) error {
	data, err := esdbwire.NewCodec().Marshal(m)
	if err != nil {
		return err
	}
	resp := &streams.BatchAppendResp{}
	if err := proto.Unmarshal(data.Materialize(), resp); err != nil {
		return err
	}
	f.sent = append(f.sent, resp)
	return nil
}

// RecvMsg encodes the next request with protobuf and decodes it with the
// server's codec, as gRPC would.
func (f *batchStream) RecvMsg(m any) error {
	if len(f.in) == 0 {
		return io.EOF
	}
	data, err := proto.Marshal(f.in[0])
	if err != nil {
		return err
	}
	f.in = f.in[1:]
	return esdbwire.NewCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, m)
}

// FuzzBatchAppend feeds arbitrary request sequences to BatchAppend: it must
// never panic, answer only correlation ids it was given, and, when the call
// ends cleanly, answer every append whose first request arrived.
func FuzzBatchAppend(f *testing.F) {
	id := &shared.UUID{Value: &shared.UUID_String_{String_: "8c5e9a3e-9a4b-4f6e-8d2a-2b1f7d0c9e11"}}
	corr := &shared.UUID{Value: &shared.UUID_String_{String_: "1c5e9a3e-9a4b-4f6e-8d2a-2b1f7d0c9e12"}}
	opts := &streams.BatchAppendReq_Options{StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte("s")}}
	ev := &streams.BatchAppendReq_ProposedMessage{Id: id, Metadata: map[string]string{"type": "E"}, Data: []byte(`{}`)}
	final := &streams.BatchAppendReq{CorrelationId: corr, Options: opts, ProposedMessages: []*streams.BatchAppendReq_ProposedMessage{ev}, IsFinal: true}
	chunk := &streams.BatchAppendReq{CorrelationId: corr, Options: opts, ProposedMessages: []*streams.BatchAppendReq_ProposedMessage{ev}}
	f.Add(joinMessages(final))
	f.Add(joinMessages(chunk, chunk, final))
	f.Add(joinMessages(chunk))
	f.Add(joinMessages(&streams.BatchAppendReq{IsFinal: true}))
	svc := newFuzzService(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var in []*streams.BatchAppendReq
		given := map[string]bool{}
		for _, raw := range splitMessages(data) {
			m := &streams.BatchAppendReq{}
			if proto.Unmarshal(raw, m) != nil {
				return
			}
			in = append(in, m)
			if u, err := parseUUID(m.GetCorrelationId()); err == nil {
				given[string(u[:])] = true
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		fs := &batchStream{ctx: ctx, in: in}
		err := svc.BatchAppend(fs)
		answered := map[string]bool{}
		for _, resp := range fs.sent {
			u, perr := parseUUID(resp.GetCorrelationId())
			if perr != nil || !given[string(u[:])] {
				t.Fatalf("answered a correlation id it was not given: %v", resp.GetCorrelationId())
			}
			if resp.GetSuccess() == nil && resp.GetError() == nil {
				t.Fatalf("an answer with neither success nor error")
			}
			answered[string(u[:])] = true
		}
		if err == nil && len(answered) != len(given) {
			t.Fatalf("the call ended cleanly but answered %d of %d appends", len(answered), len(given))
		}
	})
}
