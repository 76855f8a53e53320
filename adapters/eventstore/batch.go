package eventstore

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbwire"
	"github.com/sagaengine/saga/domain"
)

// AppendPath is how the adapter sends appends.
type AppendPath string

// Append paths, chosen with the connection string's appendPath parameter
// (esdb://host:2113?tls=false&appendPath=unary).
const (
	// AppendPipelined, the default, sends every append of the Store on one
	// long-lived BatchAppend call, many in flight at once, as the official
	// .NET client does. It falls back to AppendUnary by itself when the
	// server does not implement BatchAppend, and is not used with several
	// hosts or DNS discovery, where the official client finds the leader.
	AppendPipelined AppendPath = "pipelined"
	// AppendUnary sends each append as a call of its own (Streams.Append)
	// through the official client.
	AppendUnary AppendPath = "unary"
	// AppendInProcessPath hands each append to the embedded server of the
	// same process (AppendInProcess); it is never chosen by a connection
	// string.
	AppendInProcessPath AppendPath = "in-process"
)

// appendPathParam is the connection-string parameter that chooses the
// append path; the official client ignores it.
const appendPathParam = "appendpath"

// appendPathOf reads the appendPath parameter of a connection string and
// returns the string without it, for the official client, which warns of
// parameters it does not know.
func appendPathOf(connection string) (AppendPath, string, error) {
	base, query, found := strings.Cut(connection, "?")
	if !found {
		return AppendPipelined, connection, nil
	}
	path := AppendPipelined
	var kept []string
	for _, kv := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.EqualFold(k, appendPathParam) {
			kept = append(kept, kv)
			continue
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			return "", "", errors.Wrap(err, "connection string parameter appendPath")
		}
		switch p := AppendPath(strings.ToLower(value)); p {
		case AppendPipelined, AppendUnary:
			path = p
		default:
			return "", "", errors.Newf("connection string parameter appendPath=%s: want %s or %s", value, AppendPipelined, AppendUnary)
		}
	}
	if len(kept) == 0 {
		return path, base, nil
	}
	return path, base + "?" + strings.Join(kept, "&"), nil
}

// maxChunkBytes bounds the bytes of one BatchAppend request; a larger
// append goes in several requests (chunks), so that no request nears the
// server's message size limit (the embedded server's is over 1 MiB).
const maxChunkBytes = 512 << 10

// pipelinable reports whether every event fits in a chunk. An event that
// does not goes through Streams.Append: one too large for the server's
// message limit would end the whole call, and with it the other appends in
// flight, where on its own call it fails alone.
func pipelinable(events []esdb.EventData) bool {
	for i := range events {
		if esdbwire.EncodedSize(&events[i]) > maxChunkBytes {
			return false
		}
	}
	return true
}

// maxInboundMessage is the largest message the adapter's own connection
// receives: the official client's (17 MiB, for a 16 MiB event and its
// envelope). gRPC's default, 4 MiB, would end the $all subscription at a
// larger event, and every resubscription at the same one, for good.
const maxInboundMessage = 17 << 20

// defaultAppendDeadline bounds each append when neither the caller's
// context nor the connection string (defaultDeadline) does, as the official
// client's default.
const defaultAppendDeadline = 10 * time.Second

// errBatchUnsupported says the server does not implement BatchAppend: the
// append was not made and goes through Streams.Append instead.
var errBatchUnsupported = errors.New("the event store does not implement BatchAppend")

// appendError is an error of the pipelined path with the client error code
// the official client would give for it, so that classify treats both paths
// alike.
type appendError struct {
	code esdb.ErrorCode
	err  error
}

// Error reads as the official client's errors do.
func (e *appendError) Error() string {
	msg, ok := clientMessages[e.code]
	if !ok {
		msg = fmt.Sprintf("[ErrorCode %d] (sorry, this error code is not supported by the Error() method)", e.code)
	}
	return msg + ": " + e.err.Error()
}

// clientMessages are the official client's messages for the codes the
// pipelined path reports.
var clientMessages = map[esdb.ErrorCode]string{
	esdb.ErrorCodeUnsupportedFeature:    "[ErrorCodeUnsupportedFeature] request not supported by the targeted EventStoreDB node",
	esdb.ErrorCodeDeadlineExceeded:      "[ErrorCodeDeadlineExceeded] gRPC deadline exceeded error",
	esdb.ErrorCodeUnauthenticated:       "[ErrorCodeUnauthenticated] request requires authentication and the authentication failed",
	esdb.ErrorCodeResourceNotFound:      "[ErrorCodeResourceNotFound] a remote resource was not found or its access was denied",
	esdb.ErrorCodeResourceAlreadyExists: "[ErrorCodeResourceAlreadyExists] a creation request was made for a resource that already exists",
	esdb.ErrorCodeConnectionClosed:      "[ErrorCodeConnectionClosed] the connection is already closed",
	esdb.ErrorCodeWrongExpectedVersion:  "[ErrorCodeWrongExpectedVersion] an append request failed the optimistic concurrency on the server",
	esdb.ErrorCodeAccessDenied:          "[ErrorCodeAccessDenied] the request requires the right ACL",
	esdb.ErrorCodeStreamDeleted:         "[ErrorCodeStreamDeleted] requested stream is deleted",
	esdb.ErrorCodeInternalServer:        "[ErrorCodeInternalServer] unexpected error from the server, worthy of a GitHub issue",
	esdb.ErrorUnavailable:               "[ErrorUnavailable] the server is not ready to accept requests",
}

func (e *appendError) Unwrap() error { return e.err }

// pipeline sends appends on one BatchAppend call of its own gRPC connection,
// built from the connection string as the official client builds its own.
// Any number of goroutines append at once; answers are matched to them by
// correlation id. When the call breaks, the appends in flight fail with
// Unavailable, which Store.Append retries with the same event ids
// (idempotently), and the next append opens a new call.
type pipeline struct {
	// conn is the connection to the server, replaced by one to the leader
	// when the server answers NotLeader (followLeader).
	conn     atomic.Pointer[grpc.ClientConn]
	dial     func(address string) (*grpc.ClientConn, error)
	deadline time.Duration
	logger   *slog.Logger

	// unsupported is set once the server answers Unimplemented.
	unsupported atomic.Bool

	// Correlation ids are a random prefix and a counter: unique on a call,
	// and cheaper than a random id per append.
	idPrefix uint64
	idNext   atomic.Uint64

	mu     sync.Mutex
	call   *batchCall
	closed bool
	// address is conn's: the connection string's, or the leader's.
	address string
}

// batchCall is one BatchAppend call and the appends waiting for its answers.
type batchCall struct {
	stream streams.Streams_BatchAppendClient
	cancel context.CancelFunc

	sendMu sync.Mutex

	mu      sync.Mutex
	waiting map[uuid.UUID]*waiter
	// err, once set, is why the call ended; it fails later appends.
	err error
}

type batchAnswer struct {
	reply esdbwire.Reply
	err   error
}

// waiter is where an append waits for its answer. Waiters are reused: an
// append's channel and timer cost allocations each time otherwise.
type waiter struct {
	answer chan batchAnswer
	timer  *time.Timer
}

var waiters = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &waiter{answer: make(chan batchAnswer, 1), timer: t}
}}

// basicAuth sends a user's credentials with every call, over TLS only, as
// the official client does.
type basicAuth struct{ header string }

func (b basicAuth) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.header}, nil
}

func (basicAuth) RequireTransportSecurity() bool { return true }

// newPipeline connects (lazily) to the single node conf names, or returns
// nil when conf names several nodes or DNS discovery.
func newPipeline(conf *esdb.Configuration, logger *slog.Logger) (*pipeline, error) {
	if conf.DnsDiscover || len(conf.GossipSeeds) > 0 || conf.Address == "" {
		return nil, nil
	}
	var opts []grpc.DialOption
	if conf.DisableTLS {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	} else {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			InsecureSkipVerify: conf.SkipCertificateVerification,
			RootCAs:            conf.RootCAs,
		})))
		if conf.Username != "" && conf.Password != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(basicAuth{
				header: "Basic " + base64.StdEncoding.EncodeToString([]byte(conf.Username+":"+conf.Password)),
			}))
		}
	}
	// Requests are encoded and answers decoded by hand (esdbwire.Codec).
	// Answers are decoded by hand into values that keep none of their bytes:
	// grpc-go returns its receive buffers to its pool once they are decoded.
	opts = append(opts, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(esdbwire.NewCodec()), grpc.MaxCallRecvMsgSize(maxInboundMessage)))
	if conf.KeepAliveInterval >= 0 {
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: conf.KeepAliveInterval, Timeout: conf.KeepAliveTimeout, PermitWithoutStream: true,
		}))
	}
	dial := func(address string) (*grpc.ClientConn, error) {
		conn, err := grpc.NewClient(address, opts...)
		return conn, errors.Wrapf(err, "connect to %s", address)
	}
	conn, err := dial(conf.Address)
	if err != nil {
		return nil, err
	}
	deadline := defaultAppendDeadline
	if conf.DefaultDeadline != nil {
		deadline = *conf.DefaultDeadline
	}
	prefix := uuid.New()
	p := &pipeline{dial: dial, address: conf.Address, deadline: deadline, logger: logger,
		idPrefix: binary.BigEndian.Uint64(prefix[:8])}
	p.conn.Store(conn)
	return p, nil
}

// notLeader reads KurrentDB's NotLeader answer from a call's trailers: the
// exception and the leader's host and port (RpcExceptions.LeaderInfo), as
// the official client reads them.
func notLeader(trailer metadata.MD) (string, bool) {
	if v := trailer.Get(esdbwire.TrailerException); len(v) == 0 || v[0] != esdbwire.ExceptionNotLeader {
		return "", false
	}
	host, port := trailer.Get(esdbwire.TrailerLeaderHost), trailer.Get(esdbwire.TrailerLeaderPort)
	if len(host) == 0 || len(port) == 0 || host[0] == "" {
		return "", false
	}
	if n, err := strconv.ParseUint(port[0], 10, 16); err != nil || n == 0 {
		return "", false
	}
	return net.JoinHostPort(host[0], port[0]), true
}

// followLeader moves the pipeline to the leader a server named in its
// NotLeader answer, as the official client reconnects: the next call, and
// the next subscription on this connection, go to the leader.
func (p *pipeline) followLeader(leader string) {
	p.mu.Lock()
	if p.closed || leader == p.address {
		p.mu.Unlock()
		return
	}
	conn, err := p.dial(leader)
	if err != nil {
		p.mu.Unlock()
		p.logger.Warn("event store answered NotLeader; cannot connect to the leader it names", "leader", leader, "err", err.Error())
		return
	}
	old := p.conn.Swap(conn)
	from := p.address
	p.address = leader
	p.mu.Unlock()
	_ = old.Close()
	p.logger.Info("event store answered NotLeader; appending to the leader", "from", from, "leader", leader)
}

// close ends the call and the connection; later appends fail with
// ConnectionClosed, as the official client's do once it is closed.
func (p *pipeline) close() error {
	// Closing the connection first ends a call being opened, which holds mu.
	first := p.conn.Load()
	err := first.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if conn := p.conn.Load(); conn != first {
		// Moved to a leader meanwhile.
		_ = conn.Close()
	}
	if p.call != nil {
		p.call.cancel()
		p.call = nil
	}
	return errors.Wrap(err, "close BatchAppend connection")
}

// current returns the open call, opening one if there is none.
func (p *pipeline) current() (*batchCall, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, &appendError{code: esdb.ErrorCodeConnectionClosed, err: errors.New("event store adapter closed")}
	}
	if p.call != nil {
		return p.call, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := streams.NewStreamsClient(p.conn.Load()).BatchAppend(ctx)
	if err != nil {
		cancel()
		return nil, callError(err)
	}
	c := &batchCall{stream: stream, cancel: cancel, waiting: map[uuid.UUID]*waiter{}}
	p.call = c
	go p.receive(c)
	return c, nil
}

// receive hands each answer of c to the append waiting for it, until the
// call ends; then it fails every append still waiting.
func (p *pipeline) receive(c *batchCall) {
	var r esdbwire.Reply
	for {
		// A bad answer (wireCodec refuses it) ends the call with Internal.
		if err := c.stream.RecvMsg(&r); err != nil {
			if leader, ok := notLeader(c.stream.Trailer()); ok {
				// The appends in flight fail with NotLeader, which Append
				// retries: on a new call, to the leader.
				p.followLeader(leader)
				err = &appendError{code: esdb.ErrorCodeNotLeader, err: err}
			}
			p.end(c, err)
			return
		}
		c.mu.Lock()
		w := c.waiting[r.Corr]
		delete(c.waiting, r.Corr)
		c.mu.Unlock()
		if w != nil {
			w.answer <- batchAnswer{reply: r}
		}
	}
}

// end records why c ended, fails its waiting appends and lets the next
// append open a new call.
func (p *pipeline) end(c *batchCall, cause error) {
	var err error
	if a := (*appendError)(nil); errors.As(cause, &a) {
		err = a
	} else {
		err = callError(cause)
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		err = &appendError{code: esdb.ErrorCodeConnectionClosed, err: errors.New("event store adapter closed")}
	} else if status.Code(cause) == codes.Unimplemented {
		if !p.unsupported.Swap(true) {
			p.logger.Info("the event store does not implement BatchAppend; appending through Append")
		}
		err = errBatchUnsupported
	}
	c.cancel()
	c.mu.Lock()
	c.err = err
	waiting := c.waiting
	c.waiting = nil
	c.mu.Unlock()
	for _, w := range waiting {
		w.answer <- batchAnswer{err: err}
	}
	p.mu.Lock()
	if p.call == c {
		p.call = nil
	}
	p.mu.Unlock()
}

// callError is the error the appends of a broken call fail with: what the
// official client would report for the call's status, and Unavailable (so
// retried) for a call that ended without one.
func callError(err error) error {
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.Unavailable, "the BatchAppend call ended")
	}
	if _, ok := status.FromError(err); !ok {
		err = status.Error(codes.Unavailable, err.Error())
	}
	return &appendError{code: codeOfStatus(status.Code(err)), err: err}
}

// codeOfStatus is the official client's mapping of a gRPC status code to
// its error code.
func codeOfStatus(c codes.Code) esdb.ErrorCode {
	switch c {
	case codes.Unauthenticated:
		return esdb.ErrorCodeUnauthenticated
	case codes.Unimplemented:
		return esdb.ErrorCodeUnsupportedFeature
	case codes.NotFound:
		return esdb.ErrorCodeResourceNotFound
	case codes.PermissionDenied:
		return esdb.ErrorCodeAccessDenied
	case codes.DeadlineExceeded:
		return esdb.ErrorCodeDeadlineExceeded
	case codes.AlreadyExists:
		return esdb.ErrorCodeResourceAlreadyExists
	case codes.Aborted:
		return esdb.ErrorAborted
	case codes.Unavailable:
		return esdb.ErrorUnavailable
	default:
		return esdb.ErrorCodeUnknown
	}
}

// append makes one append on the call and waits for its answer, within ctx
// and the append deadline. errBatchUnsupported means nothing was written
// and the caller should use Streams.Append.
func (p *pipeline) append(ctx context.Context, stream string, expected domain.ExpectedRevision, events []esdb.EventData) (esdb.WriteResult, error) {
	if p.unsupported.Load() {
		return esdb.WriteResult{}, errBatchUnsupported
	}
	c, err := p.current()
	if err != nil {
		return esdb.WriteResult{}, err
	}
	deadline, ok := ctx.Deadline()
	if limit := time.Now().Add(p.deadline); !ok || limit.Before(deadline) {
		deadline = limit
	}
	var id uuid.UUID
	binary.BigEndian.PutUint64(id[:8], p.idPrefix)
	binary.BigEndian.PutUint64(id[8:], p.idNext.Add(1))
	w := waiters.Get().(*waiter)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		waiters.Put(w)
		return esdb.WriteResult{}, c.err
	}
	c.waiting[id] = w
	c.mu.Unlock()
	if err := c.send(esdbwire.AppendRequests(id, stream, expected, events, deadline, maxChunkBytes)); err != nil {
		c.release(id, w)
		return esdb.WriteResult{}, callError(err)
	}
	w.timer.Reset(time.Until(deadline))
	select {
	case a := <-w.answer:
		w.timer.Stop()
		waiters.Put(w)
		if a.err != nil {
			return esdb.WriteResult{}, a.err
		}
		return replyResult(&a.reply)
	case <-w.timer.C:
		c.release(id, w)
		return esdb.WriteResult{}, &appendError{code: esdb.ErrorCodeDeadlineExceeded, err: status.Error(codes.DeadlineExceeded, "append not answered before its deadline")}
	case <-ctx.Done():
		w.timer.Stop()
		c.release(id, w)
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return esdb.WriteResult{}, &appendError{code: esdb.ErrorCodeDeadlineExceeded, err: status.Error(codes.DeadlineExceeded, ctx.Err().Error())}
		}
		return esdb.WriteResult{}, &appendError{code: esdb.ErrorCodeUnknown, err: status.Error(codes.Canceled, ctx.Err().Error())}
	}
}

// send sends an append's requests, together, so that chunks of different
// appends never interleave. An error other than io.EOF (the call ended, its
// status comes to receive) is the append's.
func (c *batchCall) send(frames []esdbwire.Encoded) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	for i := range frames {
		if err := c.stream.SendMsg(&frames[i]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
	return nil
}

// release gives up waiting for an answer and returns w to the pool. An
// answer already taken from waiting is on its way to w's channel (receive
// and end send right after), so it is drained first.
func (c *batchCall) release(id uuid.UUID, w *waiter) {
	c.mu.Lock()
	_, waiting := c.waiting[id]
	delete(c.waiting, id)
	c.mu.Unlock()
	if !waiting {
		<-w.answer
	}
	waiters.Put(w)
}

// replyResult reads an append's answer as the official client reads
// Append's: the same WriteResult on success, and the same error codes and
// messages on failure. The result is a value: one allocation per append
// fewer on the path every append of the engine takes.
func replyResult(r *esdbwire.Reply) (esdb.WriteResult, error) {
	if r.Full != nil {
		res, err := fromBatchResponse(r.Full)
		if err != nil {
			return esdb.WriteResult{}, err
		}
		return *res, nil
	}
	res := esdb.WriteResult{NextExpectedVersion: r.Revision, CommitPosition: r.Commit, PreparePosition: r.Prepare}
	if r.NoStream {
		// The official client reports 1 here; keep its answer.
		res.NextExpectedVersion = 1
	}
	return res, nil
}

// fromBatchResponse reads an append's answer as the official client reads
// Append's: the same WriteResult on success, and the same error codes and
// messages on failure.
func fromBatchResponse(resp *streams.BatchAppendResp) (*esdb.WriteResult, error) {
	if s := resp.GetSuccess(); s != nil {
		res := &esdb.WriteResult{NextExpectedVersion: s.GetCurrentRevision()}
		if s.GetNoStream() != nil {
			// The official client reports 1 here; keep its answer.
			res.NextExpectedVersion = 1
		}
		if pos := s.GetPosition(); pos != nil {
			res.CommitPosition, res.PreparePosition = pos.GetCommitPosition(), pos.GetPreparePosition()
		}
		return res, nil
	}
	st := status.FromProto(resp.GetError())
	if st.Code() == codes.OK {
		return nil, &appendError{code: esdb.ErrorCodeInternalServer, err: errors.New("BatchAppend answer with neither success nor error")}
	}
	for _, d := range resp.GetError().GetDetails() {
		var wrong shared.WrongExpectedVersion
		if d.MessageIs(&wrong) && d.UnmarshalTo(&wrong) == nil {
			return nil, &appendError{code: esdb.ErrorCodeWrongExpectedVersion,
				err: fmt.Errorf("wrong expected version: expecting '%s' but got '%s'", expectedOf(&wrong), currentOf(&wrong))}
		}
		var tooLarge shared.MaximumAppendSizeExceeded
		if d.MessageIs(&tooLarge) && d.UnmarshalTo(&tooLarge) == nil {
			// As Append's answer reads: the same message, so that classify
			// and Append treat both paths alike.
			return nil, &appendError{code: esdb.ErrorCodeUnknown,
				err: status.Error(codes.InvalidArgument, esdbwire.MaxAppendSizeMessage(int(tooLarge.GetMaxAppendSize())))}
		}
		var deleted shared.StreamDeleted
		if d.MessageIs(&deleted) && d.UnmarshalTo(&deleted) == nil {
			return nil, &appendError{code: esdb.ErrorCodeStreamDeleted,
				err: fmt.Errorf("stream '%s' is deleted", deleted.GetStreamIdentifier().GetStreamName())}
		}
	}
	return nil, &appendError{code: codeOfStatus(st.Code()), err: st.Err()}
}

func expectedOf(w *shared.WrongExpectedVersion) string {
	switch {
	case w.GetExpectedAny() != nil:
		return "any"
	case w.GetExpectedNoStream() != nil:
		return "no_stream"
	case w.GetExpectedStreamExists() != nil:
		return "stream_exists"
	default:
		return strconv.FormatUint(w.GetExpectedStreamPosition(), 10)
	}
}

func currentOf(w *shared.WrongExpectedVersion) string {
	if w.GetCurrentNoStream() != nil {
		return "no_stream"
	}
	return strconv.FormatUint(w.GetCurrentStreamRevision(), 10)
}
