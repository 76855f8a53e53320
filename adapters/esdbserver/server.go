package esdbserver

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/persistent"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/serverfeatures"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/cockroachdb/errors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
	"github.com/sagaengine/saga/adapters/esdbwire"
	"github.com/sagaengine/saga/adapters/internal/diskflush"
)

// DefaultListen is EventStoreDB's default address, on loopback.
const DefaultListen = "127.0.0.1:2113"

// ProtocolVersion is the EventStoreDB server version whose client protocol
// this server implements; clients read it through ServerFeatures.
const ProtocolVersion = "24.10.0"

// Defaults of Config, declared once for the server and for the flags of
// sagad eventstore.
const (
	// DefaultMaxEventSize bounds one event's data plus metadata: KurrentDB's
	// largest log record, 16 MiB. MaxAppendSize binds first unless raised.
	DefaultMaxEventSize = 16 << 20
	// DefaultMaxAppendSize bounds all events of one append, however many
	// requests carry them: KurrentDB's default MaxAppendSize, 1 MiB, so
	// that what the embedded server accepts a real one accepts too.
	DefaultMaxAppendSize = esdbwire.DefaultMaxAppendSize
	// DefaultMaxSearchWindow is how many events one page of a filtered $all
	// read or subscription examines at most: EventStoreDB's max search
	// window.
	DefaultMaxSearchWindow = 10_000
	// DefaultMaxFilterRegex bounds a filter's regular expression, in bytes.
	DefaultMaxFilterRegex = 1_000
	// DefaultMaxReadBytes bounds the events one page of a read or
	// subscription loads and sends.
	DefaultMaxReadBytes = 4 << 20
	// DefaultMaxSubscriptions bounds the subscriptions served at once.
	DefaultMaxSubscriptions = 1_000
)

// Config configures a Server. A zero limit means its default.
type Config struct {
	// Listen is the TCP address to serve on. Default DefaultListen.
	Listen string
	// DataDir holds the log. Required.
	DataDir string
	// MaxEventSize bounds one event's data plus metadata. Default
	// DefaultMaxEventSize.
	MaxEventSize int
	// MaxAppendSize bounds the data and metadata of all events of one
	// append, however many requests (chunks) carry them; an append over it
	// is refused as KurrentDB refuses it (MaximumAppendSizeExceeded).
	// Default DefaultMaxAppendSize.
	MaxAppendSize int
	// SegmentSize is the size of a log segment file. Default 256 MiB.
	SegmentSize uint64
	// Now is the store's clock: events' created times and $maxAge go by
	// it. Default time.Now; tests inject one to let hours pass.
	Now func() time.Time
	// MaxSearchWindow bounds how many events one page of a filtered $all
	// read or subscription examines before it sends what it found; a
	// subscription sends a checkpoint at least this often, whatever window
	// the client asked for. A read goes on page by page until it has its
	// count or reaches the end, as EventStoreDB's does, and stops when the
	// client cancels. Default DefaultMaxSearchWindow.
	MaxSearchWindow int
	// MaxFilterRegex bounds a filter's regular expression, in bytes; a
	// longer one is refused with InvalidArgument. Default
	// DefaultMaxFilterRegex.
	MaxFilterRegex int
	// MaxReadBytes bounds, by their stored size, the events one page of a
	// read or subscription holds in memory to send; a page always holds at
	// least one event. Default DefaultMaxReadBytes.
	MaxReadBytes int
	// MaxSubscriptions bounds the catch-up subscriptions served at once;
	// one more is refused with ResourceExhausted. Default
	// DefaultMaxSubscriptions.
	MaxSubscriptions int
	// TLS, when set, makes the server secure: it serves TLS only, with
	// this configuration, and every call but discovery must carry the
	// credentials of a user (HTTP basic, as EventStoreDB clients send them
	// over TLS): anonymous calls fail with Unauthenticated. Reading $all,
	// reading or writing $-prefixed streams, deleting and tombstoning are
	// reserved to AdminsGroup (PermissionDenied otherwise). Unset, the
	// server is insecure: plaintext, and anyone may do anything.
	TLS *tls.Config
	// UsersFile lists the users of a secure server (LoadUsers). With
	// neither it nor Users, a secure server has one user, admin with the
	// well-known password changeit, and says so loudly.
	UsersFile string
	// Users are users besides those of UsersFile.
	Users []User
	// IndexMemtableEntries is how many stream-index entries the store keeps
	// in memory before it writes them to disk and checkpoints its index
	// (open replays at most about twice as many). 0 means eslog's default.
	IndexMemtableEntries int
	// IndexCacheStreams is how many streams' states the store caches. 0
	// means eslog's default.
	IndexCacheStreams int
	// DisableBatchAppend makes the server answer BatchAppend with
	// Unimplemented, as EventStoreDB before 21.10 does, so that clients'
	// fallback to Append can be tested.
	DisableBatchAppend bool
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
}

// Validate reports every problem with the configuration.
func (c *Config) Validate() error {
	var errs error
	if c.DataDir == "" {
		errs = errors.CombineErrors(errs, errors.New("event store: a data directory is required"))
	}
	for _, l := range []struct {
		name  string
		value int
	}{
		{"max event size", c.MaxEventSize},
		{"max append size", c.MaxAppendSize},
		{"max search window", c.MaxSearchWindow},
		{"max filter regex", c.MaxFilterRegex},
		{"max read bytes", c.MaxReadBytes},
		{"max subscriptions", c.MaxSubscriptions},
	} {
		if l.value < 0 {
			errs = errors.CombineErrors(errs, errors.Newf("event store: %s must not be negative, got %d", l.name, l.value))
		}
	}
	return errs
}

func (c *Config) setDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	orDefault := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	orDefault(&c.MaxEventSize, DefaultMaxEventSize)
	orDefault(&c.MaxAppendSize, DefaultMaxAppendSize)
	orDefault(&c.MaxSearchWindow, DefaultMaxSearchWindow)
	orDefault(&c.MaxFilterRegex, DefaultMaxFilterRegex)
	orDefault(&c.MaxReadBytes, DefaultMaxReadBytes)
	orDefault(&c.MaxSubscriptions, DefaultMaxSubscriptions)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server is a running embedded event-store server.
type Server struct {
	cfg     Config
	store   *eslog.Store
	streams *streamsService
	persist *persistentService
	grpc    *grpc.Server
	lis     net.Listener
	done    chan error
	// closing ends subscriptions, which never end by themselves, so that a
	// graceful stop does not wait for them.
	closing chan struct{}
	once    sync.Once
	err     error
}

// Start opens the store and starts serving. The listener is bound before
// Start returns, so a client may connect at once.
func Start(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	store, err := eslog.Open(eslog.Options{
		Dir: cfg.DataDir, SegmentSize: cfg.SegmentSize, MaxEventSize: cfg.MaxEventSize, Logger: cfg.Logger, Now: cfg.Now,
		IndexMemtableEntries: cfg.IndexMemtableEntries, IndexCacheStreams: cfg.IndexCacheStreams,
	})
	if err != nil {
		return nil, errors.Wrapf(err, "open event store in %s", cfg.DataDir)
	}
	var secure []grpc.ServerOption
	if cfg.TLS != nil {
		users := cfg.Users
		if cfg.UsersFile != "" {
			fromFile, err := LoadUsers(cfg.UsersFile)
			if err != nil {
				_ = store.Close()
				return nil, err
			}
			users = append(fromFile, users...)
		}
		if len(users) == 0 {
			hash, err := HashPassword(DefaultAdminPassword)
			if err != nil {
				_ = store.Close()
				return nil, err
			}
			users = []User{{Name: DefaultAdminUser, Hash: hash, Groups: []string{AdminsGroup}}}
			cfg.Logger.Warn("EVENT STORE RUNS WITH THE DEFAULT ACCOUNT admin/changeit, WHICH EVERYONE KNOWS: give it a users file")
		}
		auth := newAuthenticator(users)
		secure = []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg.TLS)),
			grpc.ChainUnaryInterceptor(auth.unary), grpc.ChainStreamInterceptor(auth.stream)}
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		_ = store.Close()
		return nil, errors.Wrapf(err, "listen on %s", cfg.Listen)
	}
	s := &Server{cfg: cfg, store: store, lis: lis, done: make(chan error, 1), closing: make(chan struct{})}
	s.grpc = grpc.NewServer(append(secure,
		grpc.MaxRecvMsgSize(cfg.MaxEventSize+1<<20),
		// Appends are short streams: reuse handler goroutines instead of
		// starting one for each call (grpc-go pools receive buffers itself).
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.SharedWriteBuffer(true),
		// BatchAppend's messages are decoded and encoded by hand, and reads
		// send events encoded by hand (encodedMsg).
		grpc.ForceServerCodecV2(esdbwire.NewCodec()),
		// The official client pings every 10 s, with or without calls in
		// flight; the default enforcement would answer too_many_pings and
		// drop idle subscriptions.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)...)
	s.streams = &streamsService{store: store, cfg: &s.cfg, closing: s.closing}
	streams.RegisterStreamsServer(s.grpc, s.streams)
	serverfeatures.RegisterServerFeaturesServer(s.grpc, featuresService{batchAppend: !cfg.DisableBatchAppend})
	if s.persist, err = newPersistentService(store, &s.cfg, s.closing); err != nil {
		_ = lis.Close()
		_ = store.Close()
		return nil, err
	}
	persistent.RegisterPersistentSubscriptionsServer(s.grpc, s.persist)
	registerOperations(s.grpc, store, cfg.Logger)
	go func() { s.done <- s.grpc.Serve(lis) }()
	// flush says how appends reach the disk: io_uring, or fdatasync and why
	// (diskflush).
	flush := diskflush.Method()
	if why := diskflush.Why(); why != "" {
		flush += " (" + why + ")"
	}
	cfg.Logger.Info("event store listening", "addr", lis.Addr().String(), "data", cfg.DataDir, "tls", cfg.TLS != nil, "authentication", cfg.TLS != nil,
		"flush", flush)
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Health returns nil while the store accepts writes, and otherwise why not
// (a disk failure that needs a restart, or a closed store). A readiness
// probe can serve it.
func (s *Server) Health() error { return s.store.Health() }

// Subscriptions is the number of catch-up subscriptions being served.
func (s *Server) Subscriptions() int { return int(s.streams.subscriptions.Load()) }

// Store gives in-process access to the storage engine.
func (s *Server) Store() *eslog.Store { return s.store }

// AppendLocal is an append from a client in the same process: the limits of
// an append through Streams.Append (MaxEventSize, MaxAppendSize; a refusal
// is eslog.ErrInvalidRequest, with KurrentDB's message for an append over
// MaxAppendSize, esdbwire.MaxAppendSizeMessage), the same store and group commit, and the
// same answer once the events are durable, without gRPC. It is for saga's
// own engine running beside its embedded server.
func (s *Server) AppendLocal(ctx context.Context, stream string, expected eslog.Expected, events []eslog.ProposedEvent) (eslog.WriteResult, error) {
	total := 0
	for i := range events {
		total += len(events[i].Data) + len(events[i].Metadata)
	}
	if total > s.cfg.MaxAppendSize {
		return eslog.WriteResult{}, errors.Wrap(eslog.ErrInvalidRequest, esdbwire.MaxAppendSizeMessage(s.cfg.MaxAppendSize))
	}
	return s.store.Append(ctx, stream, expected, events)
}

// ErrServerClosed ends a local subscription when the server shuts down.
var ErrServerClosed = errors.New("event store server shutting down")

// SubscribeAllLocal follows $all for a client in the same process, as a
// filtered catch-up subscription through Streams.Read does: the events of
// streams starting with one of prefixes (all when none), after position
// after (from the start when hasAfter is false), in order; then caughtUp
// once every event there is has been delivered; then each commit's events
// as they come, until ctx ends (its error), the server closes
// (ErrServerClosed) or a callback fails (its error, as it is). The event
// handed to event, its data and metadata included, is valid only during
// the call.
func (s *Server) SubscribeAllLocal(ctx context.Context, after uint64, hasAfter bool, prefixes []string,
	event func(*eslog.RecordedEvent) error, caughtUp func() error) error {
	var filter *eslog.Filter
	lim := eslog.ReadLimits{Events: pageSize, Bytes: s.cfg.MaxReadBytes}
	if len(prefixes) > 0 {
		filter = &eslog.Filter{Prefixes: prefixes}
		lim.Examine = s.cfg.MaxSearchWindow
	}
	from := eslog.AllFrom{}
	if hasAfter {
		from.Position = after + 1
	}
	return followAll(ctx, s.store, from, lim, filter, func(page eslog.Page) error {
		for i := range page.Events {
			if err := event(&page.Events[i]); err != nil {
				return err
			}
		}
		return nil
	}, caughtUp, func(changed <-chan struct{}) error {
		select {
		case <-changed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closing:
			return ErrServerClosed
		}
	})
}

// Close stops accepting calls, ends open subscriptions (clients see
// Unavailable and resubscribe), waits for calls in flight and closes the
// store. Calling it again does nothing.
func (s *Server) Close() error {
	s.once.Do(func() {
		close(s.closing)
		stopped := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			s.grpc.Stop()
			<-stopped
		}
		<-s.done
		s.persist.stop()
		s.err = s.store.Close()
	})
	return s.err
}

type featuresService struct {
	serverfeatures.UnimplementedServerFeaturesServer
	batchAppend bool
}

func (f featuresService) GetSupportedMethods(context.Context, *shared.Empty) (*serverfeatures.SupportedMethods, error) {
	const streamsService = "event_store.client.streams.streams"
	methods := []*serverfeatures.SupportedMethod{
		{ServiceName: streamsService, MethodName: "read"},
		{ServiceName: streamsService, MethodName: "append"},
		{ServiceName: streamsService, MethodName: "delete"},
		{ServiceName: streamsService, MethodName: "tombstone"},
		{ServiceName: "event_store.client.server_features.serverfeatures", MethodName: "getsupportedmethods"},
	}
	if f.batchAppend {
		methods = append(methods, &serverfeatures.SupportedMethod{ServiceName: streamsService, MethodName: "batchappend"})
	}
	methods = append(methods, persistentMethods()...)
	methods = append(methods, operationsMethods()...)
	return &serverfeatures.SupportedMethods{Methods: methods, EventStoreServerVersion: ProtocolVersion}, nil
}
