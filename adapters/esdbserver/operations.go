package esdbserver

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/serverfeatures"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// The Operations service of KurrentDB (operations.proto, package
// event_store.client.operations), as far as the embedded store has it:
// StartScavenge and StopScavenge. Neither official Go client ships its
// generated types, so its three messages are encoded here by hand, through
// esdbwire's codec, for the server and for clients (sagactl) alike.
const (
	// OperationsService is the service's full gRPC name.
	OperationsService = "event_store.client.operations.Operations"
	// StartScavengeMethod and StopScavengeMethod are its methods' full names.
	StartScavengeMethod = "/" + OperationsService + "/StartScavenge"
	StopScavengeMethod  = "/" + OperationsService + "/StopScavenge"

	// ScavengesStream is the stream where each scavenge's end is recorded
	// (a ScavengeCompletedEventType event), as KurrentDB does; the events
	// of one scavenge are also in ScavengesStream + "-" + its id.
	ScavengesStream = "$scavenges"
	// ScavengeStartedEventType and ScavengeCompletedEventType are the types
	// of those events.
	ScavengeStartedEventType   = "$scavengeStarted"
	ScavengeCompletedEventType = "$scavengeCompleted"
)

// ScavengeResult is ScavengeResp's scavenge_result.
type ScavengeResult int32

// The scavenge results KurrentDB answers.
const (
	ScavengeStarted    ScavengeResult = 0
	ScavengeInProgress ScavengeResult = 1
	ScavengeStopped    ScavengeResult = 2
)

func (r ScavengeResult) String() string {
	switch r {
	case ScavengeStarted:
		return "Started"
	case ScavengeInProgress:
		return "InProgress"
	case ScavengeStopped:
		return "Stopped"
	}
	return "Unknown"
}

// StartScavengeReq asks for a scavenge. ThreadCount and StartFromChunk are
// KurrentDB's options; the embedded store scavenges every closed segment
// with one goroutine and ignores them.
type StartScavengeReq struct {
	ThreadCount, StartFromChunk int32
}

// StopScavengeReq asks to stop the scavenge ScavengeID.
type StopScavengeReq struct{ ScavengeID string }

// ScavengeResp names a scavenge and what became of the request.
type ScavengeResp struct {
	ScavengeID string
	Result     ScavengeResult
}

// MarshalWire encodes r as protobuf.
func (r *StartScavengeReq) MarshalWire() []byte {
	var opts []byte
	if r.ThreadCount != 0 {
		opts = protowire.AppendTag(opts, 1, protowire.VarintType)
		opts = protowire.AppendVarint(opts, uint64(int64(r.ThreadCount)))
	}
	if r.StartFromChunk != 0 {
		opts = protowire.AppendTag(opts, 2, protowire.VarintType)
		opts = protowire.AppendVarint(opts, uint64(int64(r.StartFromChunk)))
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(b, opts)
}

// UnmarshalWire decodes r from protobuf.
func (r *StartScavengeReq) UnmarshalWire(b []byte) error {
	*r = StartScavengeReq{}
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		return eachField(v, func(num protowire.Number, typ protowire.Type, _ []byte, n uint64) error {
			switch {
			case num == 1 && typ == protowire.VarintType:
				r.ThreadCount = int32(n)
			case num == 2 && typ == protowire.VarintType:
				r.StartFromChunk = int32(n)
			}
			return nil
		})
	})
}

// MarshalWire encodes r as protobuf.
func (r *StopScavengeReq) MarshalWire() []byte {
	opts := protowire.AppendTag(nil, 1, protowire.BytesType)
	opts = protowire.AppendString(opts, r.ScavengeID)
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(b, opts)
}

// UnmarshalWire decodes r from protobuf.
func (r *StopScavengeReq) UnmarshalWire(b []byte) error {
	*r = StopScavengeReq{}
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			if num == 1 && typ == protowire.BytesType {
				r.ScavengeID = string(v)
			}
			return nil
		})
	})
}

// MarshalWire encodes r as protobuf.
func (r *ScavengeResp) MarshalWire() []byte {
	var b []byte
	if r.ScavengeID != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, r.ScavengeID)
	}
	if r.Result != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(r.Result))
	}
	return b
}

// UnmarshalWire decodes r from protobuf.
func (r *ScavengeResp) UnmarshalWire(b []byte) error {
	*r = ScavengeResp{}
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			r.ScavengeID = string(v)
		case num == 2 && typ == protowire.VarintType:
			r.Result = ScavengeResult(int32(n))
		}
		return nil
	})
}

// eachField calls fn with each field of a protobuf message: its number, its
// wire type, and its bytes (length-delimited) or value (varint); fields of
// other types are skipped.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return errors.Wrap(protowire.ParseError(l), "decode operations message")
		}
		b = b[l:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.VarintType:
			n, l = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, l = protowire.ConsumeBytes(b)
		default:
			l = protowire.ConsumeFieldValue(num, typ, b)
		}
		if l < 0 {
			return errors.Wrap(protowire.ParseError(l), "decode operations message")
		}
		b = b[l:]
		if err := fn(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}

// operationsServer is the interface grpc checks the service against.
type operationsServer interface {
	StartScavenge(context.Context, *StartScavengeReq) (*ScavengeResp, error)
	StopScavenge(context.Context, *StopScavengeReq) (*ScavengeResp, error)
}

func unaryHandler[Req any](method string, call func(operationsServer, context.Context, *Req) (*ScavengeResp, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(Req)
		if err := dec(in); err != nil {
			return nil, err
		}
		handler := func(ctx context.Context, req any) (any, error) { return call(srv.(operationsServer), ctx, req.(*Req)) }
		if interceptor == nil {
			return handler(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, handler)
	}
}

var operationsDesc = grpc.ServiceDesc{
	ServiceName: OperationsService,
	HandlerType: (*operationsServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "StartScavenge", Handler: unaryHandler(StartScavengeMethod, operationsServer.StartScavenge)},
		{MethodName: "StopScavenge", Handler: unaryHandler(StopScavengeMethod, operationsServer.StopScavenge)},
	},
	Metadata: "operations.proto",
}

// operationsMethods are the methods ServerFeatures announces for the
// service, in its lower-case names as KurrentDB announces them.
func operationsMethods() []*serverfeatures.SupportedMethod {
	const service = "event_store.client.operations.operations"
	return []*serverfeatures.SupportedMethod{{ServiceName: service, MethodName: "startscavenge"}, {ServiceName: service, MethodName: "stopscavenge"}}
}

// operationsService runs one scavenge at a time in the background and
// records its start and end in ScavengesStream.
type operationsService struct {
	store  *eslog.Store
	logger *slog.Logger

	mu      sync.Mutex
	running *scavengeRun
}

type scavengeRun struct {
	id     string
	cancel context.CancelFunc
}

// ScavengeCompleted is the data of a ScavengeCompletedEventType event.
type ScavengeCompleted struct {
	ScavengeID string `json:"scavengeId"`
	// Result is Success, Stopped or Failed, as KurrentDB writes it.
	Result            string `json:"result"`
	Error             string `json:"error,omitempty"`
	TimeTaken         string `json:"timeTaken"`
	SpaceSaved        int64  `json:"spaceSaved"`
	EventsRemoved     int64  `json:"eventsRemoved"`
	SegmentsScanned   int    `json:"segmentsScanned"`
	SegmentsRewritten int    `json:"segmentsRewritten"`
}

func registerOperations(s *grpc.Server, store *eslog.Store, logger *slog.Logger) *operationsService {
	o := &operationsService{store: store, logger: logger}
	s.RegisterService(&operationsDesc, o)
	return o
}

// mayOperate refuses users outside AdminsGroup on a secure server.
func mayOperate(ctx context.Context, what string) error {
	if u, ok := ctx.Value(userKey{}).(User); ok && !u.Admin() {
		return denied(u, what)
	}
	return nil
}

// StartScavenge starts a scavenge and answers Started with its id, or
// InProgress with the id of the one already running.
func (o *operationsService) StartScavenge(ctx context.Context, _ *StartScavengeReq) (*ScavengeResp, error) {
	if err := mayOperate(ctx, "start a scavenge"); err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running != nil {
		return &ScavengeResp{ScavengeID: o.running.id, Result: ScavengeInProgress}, nil
	}
	runCtx, cancel := context.WithCancel(context.Background())
	run := &scavengeRun{id: uuid.NewString(), cancel: cancel}
	o.running = run
	go o.scavenge(runCtx, run)
	return &ScavengeResp{ScavengeID: run.id, Result: ScavengeStarted}, nil
}

// StopScavenge stops the running scavenge if it has the id asked for; what
// it already rewrote stays rewritten. An unknown id is NotFound.
func (o *operationsService) StopScavenge(ctx context.Context, req *StopScavengeReq) (*ScavengeResp, error) {
	if err := mayOperate(ctx, "stop a scavenge"); err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running == nil || o.running.id != req.ScavengeID {
		return nil, status.Errorf(codes.NotFound, "scavenge %q is not running", req.ScavengeID)
	}
	o.running.cancel()
	return &ScavengeResp{ScavengeID: req.ScavengeID, Result: ScavengeStopped}, nil
}

func (o *operationsService) scavenge(ctx context.Context, run *scavengeRun) {
	defer run.cancel()
	o.record(run.id, ScavengeStartedEventType, map[string]string{"scavengeId": run.id})
	start := time.Now()
	res, err := o.store.Scavenge(ctx)
	done := ScavengeCompleted{ScavengeID: run.id, Result: "Success", TimeTaken: time.Since(start).String(),
		SpaceSaved: res.BytesRemoved, EventsRemoved: res.EventsRemoved,
		SegmentsScanned: res.SegmentsScanned, SegmentsRewritten: res.SegmentsRewritten}
	switch {
	case errors.Is(err, eslog.ErrClosed):
		return // the server is stopping; the scavenge did what it recorded
	case errors.Is(err, context.Canceled):
		done.Result = "Stopped"
	case err != nil:
		done.Result, done.Error = "Failed", err.Error()
		o.logger.Error("event store: scavenge failed", "scavenge", run.id, "error", err)
	}
	o.record(run.id, ScavengeCompletedEventType, done)
	o.mu.Lock()
	o.running = nil
	o.mu.Unlock()
}

// record appends a scavenge's event to its own stream and, for its end, to
// ScavengesStream; a failure is logged (the store may be closing).
func (o *operationsService) record(id, typ string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		o.logger.Error("event store: encode scavenge event", "error", err)
		return
	}
	streams := []string{ScavengesStream + "-" + id}
	if typ == ScavengeCompletedEventType {
		streams = append(streams, ScavengesStream)
	}
	for _, stream := range streams {
		e := eslog.ProposedEvent{ID: uuid.New(), Type: typ, ContentType: "application/json", Data: b}
		if _, err := o.store.Append(context.Background(), stream, eslog.Any, []eslog.ProposedEvent{e}); err != nil {
			o.logger.Warn("event store: could not record a scavenge event", "stream", stream, "type", typ, "error", err)
		}
	}
}
