package esdbserver_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/secure"
)

// batchReq is one append of a BatchAppend call, final unless chunked.
func batchReq(corr uuid.UUID, name string, expected any, evs ...*streams.BatchAppendReq_ProposedMessage) *streams.BatchAppendReq {
	opts := &streams.BatchAppendReq_Options{StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(name)}}
	switch e := expected.(type) {
	case uint64:
		opts.ExpectedStreamPosition = &streams.BatchAppendReq_Options_StreamPosition{StreamPosition: e}
	case esdb.NoStream:
		opts.ExpectedStreamPosition = &streams.BatchAppendReq_Options_NoStream{NoStream: &emptypb.Empty{}}
	case esdb.StreamExists:
		opts.ExpectedStreamPosition = &streams.BatchAppendReq_Options_StreamExists{StreamExists: &emptypb.Empty{}}
	default:
		opts.ExpectedStreamPosition = &streams.BatchAppendReq_Options_Any{Any: &emptypb.Empty{}}
	}
	return &streams.BatchAppendReq{CorrelationId: uuidOf(corr), Options: opts, ProposedMessages: evs, IsFinal: true}
}

func uuidOf(id uuid.UUID) *shared.UUID {
	return &shared.UUID{Value: &shared.UUID_String_{String_: id.String()}}
}

func batchEvent(id uuid.UUID, typ, data string) *streams.BatchAppendReq_ProposedMessage {
	meta := map[string]string{"content-type": "application/json"}
	if typ != "" {
		meta["type"] = typ
	}
	return &streams.BatchAppendReq_ProposedMessage{Id: uuidOf(id), Metadata: meta, Data: []byte(data)}
}

// batchCall is an open BatchAppend call with its answers by correlation id.
type batchCall struct {
	t    *testing.T
	call streams.Streams_BatchAppendClient
}

func openBatch(t *testing.T, c streams.StreamsClient) *batchCall {
	call, err := c.BatchAppend(ctx(t))
	require.NoError(t, err)
	return &batchCall{t: t, call: call}
}

func (b *batchCall) send(reqs ...*streams.BatchAppendReq) {
	for _, r := range reqs {
		require.NoError(b.t, b.call.Send(r))
	}
}

// answers receives n answers and returns them by correlation id.
func (b *batchCall) answers(n int) map[string]*streams.BatchAppendResp {
	b.t.Helper()
	out := map[string]*streams.BatchAppendResp{}
	for range n {
		resp, err := b.call.Recv()
		require.NoError(b.t, err)
		out[resp.GetCorrelationId().GetString_()] = resp
	}
	return out
}

func (b *batchCall) one(req *streams.BatchAppendReq) *streams.BatchAppendResp {
	b.t.Helper()
	b.send(req)
	return b.answers(1)[req.GetCorrelationId().GetString_()]
}

func errorCode(resp *streams.BatchAppendResp) codes.Code {
	if resp.GetError() == nil {
		return codes.OK
	}
	return codes.Code(resp.GetError().GetCode())
}

// TestBatchAppendPipelinesManyStreams: many appends to many streams sent on
// one call before any answer is read are all answered, each under its
// correlation id, with the revision it reached, and are durable.
func TestBatchAppendPipelinesManyStreams(t *testing.T) {
	embeddedOnly(t)
	tg := newTarget(t)
	b := openBatch(t, rawClient(t, tg))
	const streamsN, perStream = 8, 5
	names := make([]string, streamsN)
	corr := map[string][2]int{}
	var reqs []*streams.BatchAppendReq
	for i := range names {
		names[i] = stream("batch")
	}
	for rev := range perStream {
		for i, name := range names {
			id := uuid.New()
			corr[id.String()] = [2]int{i, rev}
			var expected any = uint64(rev - 1)
			if rev == 0 {
				expected = esdb.NoStream{}
			}
			reqs = append(reqs, batchReq(id, name, expected, batchEvent(uuid.New(), "Made", fmt.Sprintf(`{"rev":%d}`, rev))))
		}
	}
	b.send(reqs...)
	got := b.answers(len(reqs))
	require.Len(t, got, len(reqs))
	for id, at := range corr {
		resp := got[id]
		require.NotNil(t, resp.GetSuccess(), "append %v: %v", at, resp.GetError())
		assert.Equal(t, uint64(at[1]), resp.GetSuccess().GetCurrentRevision())
		assert.NotZero(t, resp.GetSuccess().GetPosition().GetCommitPosition())
		assert.Equal(t, names[at[0]], string(resp.GetStreamIdentifier().GetStreamName()))
	}
	require.NoError(t, b.call.CloseSend())
	_, err := b.call.Recv()
	assert.Equal(t, io.EOF, err, "the call ends cleanly once the client closes its side")
	for _, name := range names {
		evs, err := readStream(t, tg.client, name, esdb.ReadStreamOptions{}, 100)
		require.NoError(t, err)
		assert.Equal(t, []uint64{0, 1, 2, 3, 4}, revisions(evs))
	}
	st := tg.server.Store().Stats()
	assert.LessOrEqual(t, st.Syncs, st.Writes, "appends share group commits")
}

// TestBatchAppendExpectedRevisions: the checks and answers of Append, per
// correlation id, on a call that goes on after a failure.
func TestBatchAppendExpectedRevisions(t *testing.T) {
	embeddedOnly(t)
	tg := newTarget(t)
	b := openBatch(t, rawClient(t, tg))
	s := stream("batch-rev")
	first := batchReq(uuid.New(), s, esdb.NoStream{}, batchEvent(uuid.New(), "Made", `{}`), batchEvent(uuid.New(), "Made", `{}`))
	resp := b.one(first)
	require.NotNil(t, resp.GetSuccess(), resp.GetError())
	assert.Equal(t, uint64(1), resp.GetSuccess().GetCurrentRevision())

	again := b.one(batchReq(uuid.New(), s, esdb.NoStream{}, first.ProposedMessages...))
	require.NotNil(t, again.GetSuccess(), "a retry with the same event ids is idempotent: %v", again.GetError())
	assert.Equal(t, uint64(1), again.GetSuccess().GetCurrentRevision())

	wrong := b.one(batchReq(uuid.New(), s, uint64(0), batchEvent(uuid.New(), "Made", `{}`)))
	require.Equal(t, codes.AlreadyExists, errorCode(wrong), "EventStoreDB's Status.WrongExpectedVersion")
	assert.Equal(t, "WrongExpectedVersion", wrong.GetError().GetMessage())
	require.Len(t, wrong.GetError().GetDetails(), 1)
	var detail shared.WrongExpectedVersion
	require.NoError(t, wrong.GetError().GetDetails()[0].UnmarshalTo(&detail))
	assert.Equal(t, uint64(1), detail.GetCurrentStreamRevision())
	assert.Equal(t, uint64(0), detail.GetExpectedStreamPosition())

	missing := b.one(batchReq(uuid.New(), stream("missing"), esdb.StreamExists{}, batchEvent(uuid.New(), "Made", `{}`)))
	require.Equal(t, codes.AlreadyExists, errorCode(missing))
	require.NoError(t, missing.GetError().GetDetails()[0].UnmarshalTo(&detail))
	assert.NotNil(t, detail.GetCurrentNoStream())
	assert.NotNil(t, detail.GetExpectedStreamExists())

	ok := b.one(batchReq(uuid.New(), s, uint64(1), batchEvent(uuid.New(), "Made", `{}`)))
	require.NotNil(t, ok.GetSuccess(), "the call goes on after a conflict: %v", ok.GetError())
	assert.Equal(t, uint64(2), ok.GetSuccess().GetCurrentRevision())

	_, err := tg.client.TombstoneStream(ctx(t), s, esdb.TombstoneStreamOptions{})
	require.NoError(t, err)
	gone := b.one(batchReq(uuid.New(), s, nil, batchEvent(uuid.New(), "Made", `{}`)))
	require.Equal(t, codes.NotFound, errorCode(gone), "EventStoreDB's Status.StreamDeleted")
	assert.Equal(t, "StreamDeleted", gone.GetError().GetMessage())
	var deleted shared.StreamDeleted
	require.NoError(t, gone.GetError().GetDetails()[0].UnmarshalTo(&deleted))
	assert.Equal(t, s, string(deleted.GetStreamIdentifier().GetStreamName()))
}

// TestBatchAppendBadInputIsAnsweredPerAppend: a malformed append gets a
// clear InvalidArgument under its correlation id, writes nothing, and the
// call goes on; only a request with no correlation id ends the call.
func TestBatchAppendBadInputIsAnsweredPerAppend(t *testing.T) {
	_, client, raw := startWith(t, esdbserver.Config{MaxEventSize: 1 << 10, MaxAppendSize: 2 << 10})
	b := openBatch(t, raw)
	s := stream("batch-bad")
	noOptions := &streams.BatchAppendReq{CorrelationId: uuidOf(uuid.New()), ProposedMessages: []*streams.BatchAppendReq_ProposedMessage{batchEvent(uuid.New(), "E", `{}`)}, IsFinal: true}
	noID := batchReq(uuid.New(), s, nil, &streams.BatchAppendReq_ProposedMessage{Metadata: map[string]string{"type": "E"}})
	cases := map[string]struct {
		req  *streams.BatchAppendReq
		want string
	}{
		"no options":  {noOptions, "must carry options"},
		"no stream":   {batchReq(uuid.New(), "", nil, batchEvent(uuid.New(), "E", `{}`)), "stream name is empty"},
		"no type":     {batchReq(uuid.New(), s, nil, batchEvent(uuid.New(), "", `{}`)), `no "type" metadata`},
		"no event id": {noID, "event id is missing"},
		"huge event":  {batchReq(uuid.New(), s, nil, batchEvent(uuid.New(), "E", strings.Repeat("x", 2<<10))), "over the limit of 1024"},
		"to $all":     {batchReq(uuid.New(), "$all", nil, batchEvent(uuid.New(), "E", `{}`)), "$all cannot be written to"},
	}
	for name, tc := range cases {
		resp := b.one(tc.req)
		require.Equal(t, codes.InvalidArgument, errorCode(resp), name)
		assert.Contains(t, resp.GetError().GetMessage(), tc.want, name)
		var bad shared.BadRequest
		require.NoError(t, resp.GetError().GetDetails()[0].UnmarshalTo(&bad), name)
	}
	good := b.one(batchReq(uuid.New(), s, esdb.NoStream{}, batchEvent(uuid.New(), "E", `{}`)))
	require.NotNil(t, good.GetSuccess(), "the call goes on after bad input: %v", good.GetError())
	assert.Equal(t, uint64(0), good.GetSuccess().GetCurrentRevision(), "nothing bad was written before it")

	b.send(&streams.BatchAppendReq{Options: batchReq(uuid.New(), s, nil).Options, IsFinal: true})
	_, err := b.call.Recv()
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "no correlation id: %v", err)
	assert.Contains(t, status.Convert(err).Message(), "no valid correlation id")

	evs, err := readStream(t, client, s, esdb.ReadStreamOptions{}, 100)
	require.NoError(t, err)
	assert.Equal(t, []uint64{0}, revisions(evs))
}

// TestBatchAppendChunks: an append sent in chunks is committed, whole, by
// its final chunk; one never finished is refused when the client closes.
func TestBatchAppendChunks(t *testing.T) {
	embeddedOnly(t)
	tg := newTarget(t)
	b := openBatch(t, rawClient(t, tg))
	s := stream("batch-chunks")
	id := uuid.New()
	first := batchReq(id, s, esdb.NoStream{}, batchEvent(uuid.New(), "E", `{"n":0}`))
	first.IsFinal = false
	middle := &streams.BatchAppendReq{CorrelationId: uuidOf(id), ProposedMessages: []*streams.BatchAppendReq_ProposedMessage{batchEvent(uuid.New(), "E", `{"n":1}`)}}
	last := &streams.BatchAppendReq{CorrelationId: uuidOf(id), ProposedMessages: []*streams.BatchAppendReq_ProposedMessage{batchEvent(uuid.New(), "E", `{"n":2}`)}, IsFinal: true}
	b.send(first, middle)
	other := b.one(batchReq(uuid.New(), stream("other"), nil, batchEvent(uuid.New(), "E", `{}`)))
	require.NotNil(t, other.GetSuccess(), "appends go on while another is in chunks")
	evs, err := readStream(t, tg.client, s, esdb.ReadStreamOptions{}, 10)
	assert.Empty(t, evs, "nothing of an unfinished append is written (%v)", err)

	resp := b.one(last)
	require.NotNil(t, resp.GetSuccess(), resp.GetError())
	assert.Equal(t, uint64(2), resp.GetSuccess().GetCurrentRevision())

	unfinished := batchReq(uuid.New(), s, nil, batchEvent(uuid.New(), "E", `{}`))
	unfinished.IsFinal = false
	b.send(unfinished)
	require.NoError(t, b.call.CloseSend())
	refused := b.answers(1)[unfinished.GetCorrelationId().GetString_()]
	require.Equal(t, codes.InvalidArgument, errorCode(refused))
	assert.Contains(t, refused.GetError().GetMessage(), "without its final chunk")
	evs, err = readStream(t, tg.client, s, esdb.ReadStreamOptions{}, 10)
	require.NoError(t, err)
	assert.Equal(t, []uint64{0, 1, 2}, revisions(evs))
}

// TestBatchAppendDeadlinePassed: an append whose deadline passed before it
// arrived is answered DeadlineExceeded and not written.
func TestBatchAppendDeadlinePassed(t *testing.T) {
	embeddedOnly(t)
	tg := newTarget(t)
	b := openBatch(t, rawClient(t, tg))
	s := stream("batch-late")
	req := batchReq(uuid.New(), s, nil, batchEvent(uuid.New(), "E", `{}`))
	req.Options.DeadlineOption = &streams.BatchAppendReq_Options_Deadline_21_10_0{Deadline_21_10_0: timestamppb.New(time.Now().Add(-time.Second))}
	resp := b.one(req)
	assert.Equal(t, codes.DeadlineExceeded, errorCode(resp))
	_, err := readStream(t, tg.client, s, esdb.ReadStreamOptions{}, 10)
	assert.Equal(t, esdb.ErrorCodeResourceNotFound, code(err))
}

// TestBatchAppendDisabled: a server with BatchAppend disabled answers
// Unimplemented, as an older EventStoreDB does.
func TestBatchAppendDisabled(t *testing.T) {
	_, _, raw := startWith(t, esdbserver.Config{DisableBatchAppend: true})
	b := openBatch(t, raw)
	_ = b.call.Send(batchReq(uuid.New(), stream("x"), nil, batchEvent(uuid.New(), "E", `{}`)))
	_, err := b.call.Recv()
	assert.Equal(t, codes.Unimplemented, status.Code(err))
}

type basicAuth struct{ user, password string }

func (a basicAuth) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte(a.user+":"+a.password))}, nil
}
func (basicAuth) RequireTransportSecurity() bool { return true }

// TestBatchAppendSecure: a secure server refuses an anonymous call, and
// refuses, per append, a non-admin's write to a system stream while the
// call goes on.
func TestBatchAppendSecure(t *testing.T) {
	embeddedOnly(t)
	files, err := secure.Prepare(filepath.Join(t.TempDir(), "secure"))
	require.NoError(t, err)
	tlsCfg, err := files.ServerTLS()
	require.NoError(t, err)
	caPEM, err := os.ReadFile(files.CA)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	clientTLS := &tls.Config{RootCAs: roots}
	hash, err := esdbserver.HashPassword("pw")
	require.NoError(t, err)
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), TLS: tlsCfg,
		Users: []esdbserver.User{{Name: "writer", Hash: hash}}, Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	dial := func(opts ...grpc.DialOption) streams.StreamsClient {
		conn, err := grpc.NewClient(srv.Addr(), append(opts, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return streams.NewStreamsClient(conn)
	}

	anon := openBatch(t, dial())
	_ = anon.call.Send(batchReq(uuid.New(), stream("x"), nil, batchEvent(uuid.New(), "E", `{}`)))
	_, err = anon.call.Recv()
	assert.Equal(t, codes.Unauthenticated, status.Code(err))

	b := openBatch(t, dial(grpc.WithPerRPCCredentials(basicAuth{"writer", "pw"})))
	sys := b.one(batchReq(uuid.New(), "$system-"+uuid.NewString(), nil, batchEvent(uuid.New(), "E", `{}`)))
	require.Equal(t, codes.PermissionDenied, errorCode(sys))
	assert.Contains(t, sys.GetError().GetMessage(), "may not write system stream")
	ok := b.one(batchReq(uuid.New(), stream("mine"), nil, batchEvent(uuid.New(), "E", `{}`)))
	assert.NotNil(t, ok.GetSuccess(), ok.GetError())

	wrongPassword := openBatch(t, dial(grpc.WithPerRPCCredentials(basicAuth{"writer", "nope"})))
	_ = wrongPassword.call.Send(batchReq(uuid.New(), stream("x"), nil, batchEvent(uuid.New(), "E", `{}`)))
	_, err = wrongPassword.call.Recv()
	assert.Equal(t, codes.Unauthenticated, status.Code(err))
}
