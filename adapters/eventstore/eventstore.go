// Package eventstore is saga's event-store adapter: it stores and reads task
// events in EventStoreDB, KurrentDB or saga's embedded server through the
// official EventStoreDB client, mapping the client's types and errors to the
// domain's.
//
// Event data is JSON; every event's custom metadata is the JSON of
// domain.EventMetadata (correlation id, causation id, actor, trace context).
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package eventstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbwire"
	"github.com/sagaengine/saga/domain"
)

// Store is the event-store adapter. It is safe for concurrent use.
type Store struct {
	conf   *esdb.Configuration
	logger *slog.Logger

	mu     sync.Mutex
	client *esdb.Client
	closed bool
	// gens is the generation of each checkpoint in use.
	gens map[string]int
	// observeAppend, when set, hears how each Append went.
	observeAppend AppendObserver
	// pipe, when set, carries appends (AppendPipelined).
	pipe *pipeline
	// local, when set, carries appends instead (AppendInProcess).
	local LocalAppend
	// localSubscribe, when set, carries subscriptions to $all
	// (SubscribeInProcess).
	localSubscribe LocalSubscribe
	// failures are the subscriptions to $all failing now.
	failures failingSubscriptions
}

// Outcomes of an append, as an AppendObserver hears them.
const (
	AppendOK       = "ok"
	AppendConflict = "conflict"
	AppendRefused  = "refused"
	AppendFailed   = "error"
)

// AppendObserver hears how each Append ended (AppendOK, AppendConflict,
// AppendRefused or AppendFailed) and how long it took, retries included.
// It is called on the appending goroutine and must be cheap.
type AppendObserver func(outcome string, took time.Duration)

// ObserveAppends sets the observer of appends. Call it before the store is
// used.
func (s *Store) ObserveAppends(o AppendObserver) { s.observeAppend = o }

// Dial connects to the event store at url, e.g. esdb://127.0.0.1:2113?tls=false.
// The client connects lazily, on the first call. Appends are pipelined
// (AppendPipelined) unless the connection string says appendPath=unary.
func Dial(url string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if err := checkCredentials(url); err != nil {
		return nil, err
	}
	path, forClient, err := appendPathOf(url)
	if err != nil {
		return nil, errors.Newf("event store address %q: %s", Redact(url), redactIn(err.Error(), url))
	}
	conf, err := esdb.ParseConnectionString(forClient)
	if err != nil {
		// The client's errors may quote the address, password included.
		return nil, errors.Newf("event store address %q: %s", Redact(url), redactIn(err.Error(), url))
	}
	conf.Logger = func(level esdb.LogLevel, format string, args ...any) {
		// The client logs every dropped subscription and transient error at
		// error level; the adapter reports what matters itself.
		logger.Debug("eventstore client: "+format, append([]any{"level", level}, args...)...)
	}
	client, err := esdb.NewClient(conf)
	if err != nil {
		return nil, errors.Newf("create event store client for %s: %s", Redact(url), redactIn(err.Error(), url))
	}
	s := &Store{conf: conf, client: client, logger: logger}
	if path == AppendPipelined {
		if s.pipe, err = newPipeline(conf, logger); err != nil {
			_ = client.Close()
			return nil, errors.Newf("event store address %q: %s", Redact(url), redactIn(err.Error(), url))
		}
	}
	return s, nil
}

// AppendPath is the path appends take now: AppendInProcessPath once
// AppendInProcess was called, else AppendPipelined, or AppendUnary when
// chosen, when the connection string names several nodes, or once the
// server has answered that it does not implement BatchAppend.
func (s *Store) AppendPath() AppendPath {
	if s.local != nil {
		return AppendInProcessPath
	}
	if s.pipe == nil || s.pipe.unsupported.Load() {
		return AppendUnary
	}
	return AppendPipelined
}

// Close closes the connections.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var err error
	if s.pipe != nil {
		err = s.pipe.close()
	}
	return errors.CombineErrors(s.client.Close(), err)
}

// current returns the client in use.
func (s *Store) current() *esdb.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.client
}

// replace swaps a client that closed itself for a new one. The official
// client closes for good when it cannot reach the server at first (for
// example while the server is still starting); the adapter outlives that.
func (s *Store) replace(old *esdb.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.client != old {
		return
	}
	client, err := esdb.NewClient(s.conf)
	if err != nil {
		s.logger.Error("recreate event store client", "err", err.Error())
		return
	}
	_ = old.Close()
	s.client = client
	s.logger.Info("event store client reconnecting")
}

// Append appends events to stream if expected holds and returns the
// revision of the last event. A conflict is domain.ErrConcurrencyConflict.
// Transient failures are retried with the same event ids, which the store
// recognises, so a retry never writes twice.
func (s *Store) Append(ctx context.Context, stream string, expected domain.ExpectedRevision, events ...domain.NewEvent) (uint64, error) {
	encoded, err := encodeEvents(stream, expected, events)
	if err != nil {
		return 0, err
	}
	var rev uint64
	began := time.Now()
	if s.local != nil {
		err = s.retry(ctx, func(*esdb.Client) error {
			var err error
			rev, err = s.local(ctx, stream, expected, encoded)
			return err
		})
	} else {
		err = s.appendThroughNetwork(ctx, stream, expected, encoded, &rev)
	}
	class := classify(err)
	if s.observeAppend != nil {
		outcome := AppendFailed
		switch class {
		case nil:
			outcome = AppendOK
		case errConflict:
			outcome = AppendConflict
		case errRefused:
			outcome = AppendRefused
		}
		s.observeAppend(outcome, time.Since(began))
	}
	switch class {
	case nil:
		return rev, nil
	case errConflict:
		return 0, errors.Wrapf(domain.ErrConcurrencyConflict, "append to %s: %v", stream, err)
	case errRefused:
		if limit, ok := esdbwire.ParseMaxAppendSize(err.Error()); ok {
			return 0, errors.Wrapf(errors.Mark(domain.ErrAppendRefused, ErrAppendTooLarge),
				"append to %s: %d events, over the event store's maximum append size of %d bytes: %v", stream, len(events), limit, err)
		}
		if codeOf(err) == esdb.ErrorCodeStreamDeleted || errors.Is(err, errStreamDeleted) {
			return 0, errors.Wrapf(errors.Mark(domain.ErrAppendRefused, errStreamDeleted), "append to %s: %v", stream, err)
		}
		return 0, errors.Wrapf(domain.ErrAppendRefused, "append to %s: %v", stream, err)
	default:
		return 0, errors.Wrapf(err, "append to %s", stream)
	}
}

// appendThroughNetwork appends through the pipelined path, or
// AppendToStream, with retries, setting *rev to the last event's revision.
func (s *Store) appendThroughNetwork(ctx context.Context, stream string, expected domain.ExpectedRevision, encoded []LocalEvent, rev *uint64) error {
	data := make([]esdb.EventData, len(encoded))
	for i, e := range encoded {
		data[i] = esdb.EventData{EventID: e.ID, EventType: e.Type, ContentType: esdb.ContentTypeJson, Data: e.Data, Metadata: e.Metadata}
	}
	opts := esdb.AppendToStreamOptions{ExpectedRevision: toExpected(expected)}
	return s.retry(ctx, func(c *esdb.Client) error {
		if s.pipe != nil && pipelinable(data) {
			res, err := s.pipe.append(ctx, stream, expected, data)
			if !errors.Is(err, errBatchUnsupported) {
				if err == nil {
					*rev = res.NextExpectedVersion
				}
				return err
			}
		}
		res, err := c.AppendToStream(ctx, stream, opts, data...)
		if err == nil {
			*rev = res.NextExpectedVersion
		}
		return err
	})
}

// encodeEvents gives each event its id (eventID) and its metadata's JSON,
// as every append path stores them.
func encodeEvents(stream string, expected domain.ExpectedRevision, events []domain.NewEvent) ([]LocalEvent, error) {
	out := make([]LocalEvent, len(events))
	if err := encodeMetadata(events, out); err != nil {
		return nil, err
	}
	for i, e := range events {
		id, err := eventID(stream, expected, i, e)
		if err != nil {
			return nil, err
		}
		out[i].ID, out[i].Type, out[i].Data = id, e.Type, e.Data
	}
	return out, nil
}

// eventID returns the event's id, deriving one when the caller gave none:
// for an exact expected revision the id is a hash of stream, revision and
// content, so an identical decision retried (by this or another instance) is
// idempotent, while a different decision at the same revision conflicts.
func eventID(stream string, expected domain.ExpectedRevision, i int, e domain.NewEvent) (uuid.UUID, error) {
	if e.ID != "" {
		id, err := uuid.Parse(e.ID)
		return id, errors.Wrapf(err, "event id %q", e.ID)
	}
	var slot uint64
	switch rev, ok := expected.Revision(); {
	case ok:
		slot = rev + 1 + uint64(i)
	case expected.IsNoStream():
		slot = uint64(i)
	default:
		return uuid.New(), nil
	}
	// The hash of stream, slot, type and data, in one piece when they fit
	// on the stack.
	var sum [sha256.Size]byte
	if n := len(stream) + 8 + len(e.Type) + len(e.Data); n <= 512 {
		var buf [512]byte
		b := append(buf[:0], stream...)
		b = binary.BigEndian.AppendUint64(b, slot)
		b = append(b, e.Type...)
		sum = sha256.Sum256(append(b, e.Data...))
	} else {
		h := sha256.New()
		h.Write([]byte(stream))
		h.Write(binary.BigEndian.AppendUint64(nil, slot))
		h.Write([]byte(e.Type))
		h.Write(e.Data)
		h.Sum(sum[:0])
	}
	var id uuid.UUID
	copy(id[:], sum[:])
	id[6], id[8] = id[6]&0x0f|0x50, id[8]&0x3f|0x80 // version 5 layout, RFC 4122 variant
	return id, nil
}

func toExpected(e domain.ExpectedRevision) esdb.ExpectedRevision {
	if rev, ok := e.Revision(); ok {
		return esdb.Revision(rev)
	}
	if e.IsNoStream() {
		return esdb.NoStream{}
	}
	return esdb.Any{}
}

// ReadStream reads every event of stream in order; a stream that does not
// exist reads as no events.
func (s *Store) ReadStream(ctx context.Context, stream string) ([]domain.RecordedEvent, error) {
	var out []domain.RecordedEvent
	err := s.retry(ctx, func(c *esdb.Client) error {
		out = out[:0]
		rs, err := c.ReadStream(ctx, stream, esdb.ReadStreamOptions{From: esdb.Start{}}, math.MaxUint64)
		if err != nil {
			return err
		}
		defer rs.Close()
		for {
			ev, err := rs.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			out = append(out, fromRecorded(ev.Event))
		}
	})
	if codeOf(err) == esdb.ErrorCodeResourceNotFound {
		return nil, nil
	}
	return out, errors.Wrapf(err, "read %s", stream)
}

// SubscribeAll delivers, in order, every event whose stream name starts with
// streamPrefix, from the given place, then live, until ctx ends or handle
// returns an error. If the connection drops it resubscribes after the last
// event delivered, so handle sees no gap and no repeat. While it fails
// again and again without delivering (the server is down, or an event it
// must read next is damaged), the backoff grows to 2 s and
// SubscriptionFailures names it.
func (s *Store) SubscribeAll(ctx context.Context, from domain.SubscribeFrom, streamPrefix string, handle func(domain.SubscriptionItem) error) error {
	after := positionAfter(from)
	backoff := 50 * time.Millisecond
	progressed := false
	track := &subscriptionState{}
	defer s.failures.clear(track)
	counted := func(it domain.SubscriptionItem) error {
		if !progressed {
			progressed = true
			s.failures.clear(track)
		}
		return handle(it)
	}
	for {
		var err error
		if s.localSubscribe != nil {
			err = s.followLocal(ctx, streamPrefix, counted, &after)
		} else if s.pipe != nil {
			// The pipeline's own connection, with a lean decoder (catchup.go).
			err = s.pipe.followAll(ctx, streamPrefix, counted, &after, func() {})
		} else {
			err = s.followOfficial(ctx, streamPrefix, counted, &after, &backoff)
		}
		var handlerErr handlerError
		if errors.As(err, &handlerErr) {
			return handlerErr.err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if progressed {
			backoff, progressed = 50*time.Millisecond, false
		}
		s.failures.note(track, SubscriptionFailure{After: after.commit, HasAfter: after.set, Err: err})
		s.logger.Warn("event store subscription dropped; resubscribing", "err", err.Error(), "in", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ctx.Err()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// SubscriptionFailure is a subscription to $all that has failed since Since
// without delivering anything: each try failed after position After (from
// the start when HasAfter is false), the last with Err.
type SubscriptionFailure struct {
	Since    time.Time
	After    uint64
	HasAfter bool
	Err      error
}

// SubscriptionFailures lists the subscriptions to $all of this Store that
// have been failing, without delivering, for at least d.
func (s *Store) SubscriptionFailures(d time.Duration) []SubscriptionFailure {
	return s.failures.list(d)
}

// subscriptionState keys one SubscribeAll call among the failing ones.
type subscriptionState struct{}

// failingSubscriptions are the SubscribeAll calls failing now.
type failingSubscriptions struct {
	mu sync.Mutex
	m  map[*subscriptionState]SubscriptionFailure
}

// note records a failed try of a call: since its first failure in a row.
func (f *failingSubscriptions) note(key *subscriptionState, failure SubscriptionFailure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[*subscriptionState]SubscriptionFailure{}
	}
	failure.Since = time.Now()
	if old, ok := f.m[key]; ok {
		failure.Since = old.Since
	}
	f.m[key] = failure
}

// clear forgets a call's failures: it delivered again, or ended.
func (f *failingSubscriptions) clear(key *subscriptionState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, key)
}

func (f *failingSubscriptions) list(d time.Duration) []SubscriptionFailure {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []SubscriptionFailure
	for _, failure := range f.m {
		if time.Since(failure.Since) >= d {
			out = append(out, failure)
		}
	}
	return out
}

// followOfficial follows $all through the official client, as
// SubscribeAll does when the adapter has no connection of its own.
func (s *Store) followOfficial(ctx context.Context, streamPrefix string, handle func(domain.SubscriptionItem) error, after *allPosition, backoff *time.Duration) error {
	opts := esdb.SubscribeToAllOptions{From: esdb.Start{}}
	if after.set {
		opts.From = esdb.Position{Commit: after.commit, Prepare: after.prepare}
	}
	if streamPrefix != "" {
		opts.Filter = &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{streamPrefix}}
	}
	client := s.current()
	var sub *esdb.Subscription
	err := closedUnder(func() error {
		var err error
		sub, err = client.SubscribeToAll(ctx, opts)
		return err
	})
	if codeOf(err) == esdb.ErrorCodeConnectionClosed || errors.Is(err, errClosedUnder) {
		s.replace(client)
	}
	if err != nil {
		return err
	}
	*backoff = 50 * time.Millisecond
	err = s.follow(sub, handle, after)
	_ = sub.Close()
	return err
}

type handlerError struct{ err error }

func (h handlerError) Error() string { return h.err.Error() }

func (s *Store) follow(sub *esdb.Subscription, handle func(domain.SubscriptionItem) error, after *allPosition) error {
	for {
		ev := sub.Recv()
		switch {
		case ev.SubscriptionDropped != nil:
			return errors.Wrap(ev.SubscriptionDropped.Error, "subscription dropped")
		case ev.EventAppeared != nil:
			// The record at this place in $all: for a resolved link, the link.
			original := ev.EventAppeared.OriginalEvent()
			rec := fromRecorded(original)
			if !systemEvent(&rec) {
				if err := handle(domain.SubscriptionItem{Event: &rec}); err != nil {
					return handlerError{err}
				}
			}
			*after = allPosition{commit: rec.Position, prepare: original.Position.Prepare, set: true}
		case ev.CaughtUp != nil:
			if err := handle(domain.SubscriptionItem{CaughtUp: true}); err != nil {
				return handlerError{err}
			}
		}
	}
}

func fromRecorded(e *esdb.RecordedEvent) domain.RecordedEvent {
	var meta domain.EventMetadata
	decodeMetadata(e.UserMetadata, &meta) // foreign events may carry none
	return domain.RecordedEvent{
		ID: e.EventID.String(), Stream: e.StreamID, Type: e.EventType, Data: e.Data, Metadata: meta,
		Revision: e.EventNumber, Position: e.Position.Commit, Recorded: e.CreatedDate,
	}
}

func codeOf(err error) esdb.ErrorCode {
	if err == nil {
		return -1
	}
	var e *esdb.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	var a *appendError
	if errors.As(err, &a) {
		return a.code
	}
	return -1
}

// ErrAppendTooLarge marks an append refused because its events together
// are over the event store's maximum append size (KurrentDB's
// MaximumAppendSizeExceeded; 1 MiB by default, in the embedded server
// too), whichever path it took: one request, several chunks or in process.
// It comes with domain.ErrAppendRefused.
var ErrAppendTooLarge = errors.New("append over the event store's maximum append size")

// errStreamDeleted marks an append refused because its stream was
// tombstoned.
var errStreamDeleted = errors.New("stream deleted")

// Error classes of classify.
var (
	// errTransient: the connection is down, the client gave up connecting,
	// or the server is restarting; the adapter retries.
	errTransient = errors.New("transient")
	// errConflict: the expected revision did not hold.
	errConflict = errors.New("conflict")
	// errRefused: the server refused the request as it is (too large,
	// invalid, stream deleted); the same request can never succeed.
	errRefused = errors.New("refused")
	// errOther: anything else, such as a full disk; the caller decides
	// when to try again.
	errOther = errors.New("other")
)

// classify decides, in this one place, what an event-store error means:
// nil for no error, else one of errTransient, errConflict, errRefused and
// errOther.
func classify(err error) error {
	if err == nil {
		return nil
	}
	// The in-process path's errors (LocalAppend) carry their class.
	switch {
	case errors.Is(err, ErrUnavailable), errors.Is(err, errClosedUnder):
		return errTransient
	case errors.Is(err, domain.ErrConcurrencyConflict):
		return errConflict
	case errors.Is(err, domain.ErrAppendRefused):
		return errRefused
	}
	if _, ok := esdbwire.ParseMaxAppendSize(err.Error()); ok {
		// KurrentDB's MaximumAppendSizeExceeded, by either path.
		return errRefused
	}
	switch codeOf(err) {
	case esdb.ErrorUnavailable, esdb.ErrorCodeDeadlineExceeded, esdb.ErrorCodeNotLeader, esdb.ErrorCodeConnectionClosed:
		return errTransient
	case esdb.ErrorCodeWrongExpectedVersion:
		return errConflict
	case esdb.ErrorCodeStreamDeleted:
		return errRefused
	}
	switch st, _ := status.FromError(err); st.Code() {
	case codes.InvalidArgument:
		return errRefused
	case codes.ResourceExhausted:
		// gRPC's message size limit, on either side; a full disk is
		// ResourceExhausted too, but passes once there is space again.
		if strings.Contains(st.Message(), "larger than max") {
			return errRefused
		}
	}
	return errOther
}

// errClosedUnder is a call on a client that replace closed while the call
// waited for the client's connection.
var errClosedUnder = errors.New("event store client closed during the call")

// closedUnder runs a call on an official client and turns the panic of a
// send on the client's closed channel into errClosedUnder. The client
// (v4.1.0) stops reading that channel when it gives up reconnecting, after
// setting its closed flag: a call that read the flag just before sends on
// the channel and blocks until replace closes the old client, and the send
// then panics (a kill -9 of the event store under load crashed a submitter
// so, integration/cluster).
func closedUnder(call func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok && strings.Contains(e.Error(), "send on closed channel") {
				err = errClosedUnder
				return
			}
			panic(r)
		}
	}()
	return call()
}

// retryable reports whether the adapter retries err itself.
func retryable(err error) bool { return classify(err) == errTransient }

// retry runs op until it succeeds, fails permanently or ctx ends, backing
// off with jitter between tries.
func (s *Store) retry(ctx context.Context, op func(*esdb.Client) error) error {
	backoff := 20 * time.Millisecond
	for {
		client := s.current()
		err := closedUnder(func() error { return op(client) })
		if codeOf(err) == esdb.ErrorCodeConnectionClosed || errors.Is(err, errClosedUnder) {
			s.replace(client)
		}
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return errors.Wrap(err, "gave up: "+ctx.Err().Error())
		}
		backoff = min(2*backoff, time.Second)
	}
}

// checkpointType is the event type of saved checkpoints.
const checkpointType = "CheckpointSaved"

// checkpointsKept bounds a checkpoint stream: only the newest few matter.
const checkpointsKept = 10

// checkpointStream names generation gen of a checkpoint. A tombstoned
// stream can never be written again, so when an operator (or an accident)
// tombstones a checkpoint stream, the checkpoint moves to the next
// generation: saga-checkpoint-<name>, then saga-checkpoint-<name>.2, ...
func checkpointStream(name string, gen int) string {
	if gen == 0 {
		return "saga-checkpoint-" + name
	}
	return "saga-checkpoint-" + name + "." + strconv.Itoa(gen+1)
}

// maxCheckpointGenerations bounds the search for a live generation.
const maxCheckpointGenerations = 100

// checkpointBody is a saved checkpoint: a position and, for task
// checkpoints, the tasks unfinished there.
type checkpointBody struct {
	Position uint64   `json:"position"`
	Tasks    []string `json:"tasks,omitempty"`
}

// checkpointGen returns the generation of name's checkpoint in use.
func (s *Store) checkpointGen(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gens[name]
}

// nextCheckpointGen moves name's checkpoint past a deleted generation.
func (s *Store) nextCheckpointGen(name string, deleted int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gens == nil {
		s.gens = map[string]int{}
	}
	if s.gens[name] <= deleted {
		s.gens[name] = deleted + 1
		s.logger.Warn("checkpoint stream was deleted; the checkpoint moves to a new stream",
			"deleted", checkpointStream(name, deleted), "now", checkpointStream(name, deleted+1))
	}
	return s.gens[name]
}

// LoadCheckpoint returns the newest position saved under name. A checkpoint
// stream that was deleted counts as no checkpoint (the caller starts from
// its safe point, the start); a tombstoned one is skipped for the next
// generation.
func (s *Store) LoadCheckpoint(ctx context.Context, name string) (uint64, bool, error) {
	body, found, err := s.loadNamed(ctx, name)
	return body.Position, found, err
}

// LoadTaskCheckpoint returns the newest task checkpoint saved under name,
// with the same rules for deleted streams as LoadCheckpoint.
func (s *Store) LoadTaskCheckpoint(ctx context.Context, name string) (domain.TaskCheckpoint, bool, error) {
	body, found, err := s.loadNamed(ctx, name)
	return domain.TaskCheckpoint{Position: body.Position, Tasks: body.Tasks}, found, err
}

func (s *Store) loadNamed(ctx context.Context, name string) (checkpointBody, bool, error) {
	for gen := s.checkpointGen(name); gen < maxCheckpointGenerations; gen = s.nextCheckpointGen(name, gen) {
		body, found, err := s.loadCheckpoint(ctx, checkpointStream(name, gen))
		if codeOf(err) == esdb.ErrorCodeStreamDeleted {
			continue
		}
		if err != nil {
			return body, false, errors.Wrapf(err, "load checkpoint %s", name)
		}
		if !found {
			s.logger.Info("no checkpoint; following from the start", "checkpoint", checkpointStream(name, gen))
		}
		return body, found, nil
	}
	return checkpointBody{}, false, errors.Newf("load checkpoint %s: %d generations deleted", name, maxCheckpointGenerations)
}

func (s *Store) loadCheckpoint(ctx context.Context, stream string) (checkpointBody, bool, error) {
	var body checkpointBody
	found := false
	err := s.retry(ctx, func(c *esdb.Client) error {
		body, found = checkpointBody{}, false
		rs, err := c.ReadStream(ctx, stream, esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.End{}}, 1)
		if err != nil {
			return err
		}
		defer rs.Close()
		ev, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return json.Unmarshal(ev.Event.Data, &body)
	})
	if codeOf(err) == esdb.ErrorCodeResourceNotFound {
		return checkpointBody{}, false, nil
	}
	return body, found, err
}

// SaveCheckpoint saves position under name. The checkpoint stream keeps
// only its newest events ($maxCount), so it never grows; if it was
// tombstoned, the position is saved in the next generation.
func (s *Store) SaveCheckpoint(ctx context.Context, name string, position uint64) error {
	return s.saveNamed(ctx, name, checkpointBody{Position: position})
}

// SaveTaskCheckpoint saves a task checkpoint under name, in a stream
// bounded as SaveCheckpoint's. The checkpoint is one event, so its tasks
// must fit in the store's event size limit; a save that does not fit fails
// and the previous checkpoint stays in force.
func (s *Store) SaveTaskCheckpoint(ctx context.Context, name string, cp domain.TaskCheckpoint) error {
	return s.saveNamed(ctx, name, checkpointBody{Position: cp.Position, Tasks: cp.Tasks})
}

func (s *Store) saveNamed(ctx context.Context, name string, body checkpointBody) error {
	data, err := json.Marshal(body)
	if err != nil {
		return errors.Wrapf(err, "encode checkpoint %s", name)
	}
	for gen := s.checkpointGen(name); gen < maxCheckpointGenerations; gen = s.nextCheckpointGen(name, gen) {
		stream := checkpointStream(name, gen)
		rev, err := s.Append(ctx, stream, domain.ExpectAny(), domain.NewEvent{Type: checkpointType, Data: data,
			Metadata: domain.EventMetadata{Actor: "checkpoint/" + name}})
		if errors.Is(err, errStreamDeleted) {
			continue
		}
		if err != nil {
			return errors.Wrapf(err, "save checkpoint %s", name)
		}
		// The limit is set when the stream is created, and again now and
		// then in case a crash came between the two.
		if rev%1000 == 0 {
			var meta esdb.StreamMetadata
			meta.SetMaxCount(checkpointsKept)
			err = s.retry(ctx, func(c *esdb.Client) error {
				_, err := c.SetStreamMetadata(ctx, stream, esdb.AppendToStreamOptions{}, meta)
				return err
			})
			return errors.Wrapf(err, "limit checkpoint stream %s", stream)
		}
		return nil
	}
	return errors.Newf("save checkpoint %s: %d generations deleted", name, maxCheckpointGenerations)
}
