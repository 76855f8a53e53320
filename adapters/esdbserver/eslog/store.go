package eslog

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
)

// Options configure a Store.
type Options struct {
	// Dir holds the segment files.
	Dir string
	// SegmentSize is the size at which a new segment file is started.
	// Default 256 MiB.
	SegmentSize uint64
	// MaxEventSize bounds one event's data plus metadata. Default 16 MiB.
	MaxEventSize int
	// MaxBatchBytes bounds how much one group commit writes. Default 8 MiB.
	MaxBatchBytes int
	// Now is the clock used for created times and $maxAge. Default time.Now.
	Now func() time.Time
	// fileIO replaces the disk writes and syncs in tests.
	fileIO fileIO
	// closeAsCrash makes Close leave the index as a crash would (no flush
	// of the memtables), for tests of what open finds after a crash.
	closeAsCrash bool
	// verifiedLog replaces the constant verifiedLog in tests.
	verifiedLog uint64
	// scavengeSparse and scavengeCrashAt set the log's sparse and crashAt
	// (see segmentLog), for tests.
	scavengeSparse  bool
	scavengeCrashAt func(step, tmp string) error
	// Logger receives what open repairs, such as a cut torn tail. Default
	// slog.Default().
	Logger *slog.Logger
	// IndexMemtableEntries is how many index entries (events and
	// tombstones) the store keeps in memory before it writes them to an
	// index table and checkpoints the index; open replays at most about
	// twice as many. Default 131,072.
	IndexMemtableEntries int
	// IndexCacheStreams is how many streams' states (last revision,
	// tombstone, metadata) are cached; other streams are looked up in the
	// index on disk. Default 65,536.
	IndexCacheStreams int
	// CompactMapCacheBytes bounds the memory that the position maps of
	// compacted segments (see Scavenge) take: the maps read most recently
	// are cached up to this many bytes (about 24 a run of kept frames), the
	// others are read from their segment files when needed. Default 16 MiB;
	// a negative value is refused.
	CompactMapCacheBytes int64
}

func (o *Options) setDefaults() {
	if o.SegmentSize == 0 {
		o.SegmentSize = 256 << 20
	}
	if o.MaxEventSize == 0 {
		o.MaxEventSize = 16 << 20
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = 8 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.IndexMemtableEntries <= 0 {
		o.IndexMemtableEntries = 1 << 17
	}
	if o.IndexCacheStreams <= 0 {
		o.IndexCacheStreams = 1 << 16
	}
	if o.CompactMapCacheBytes == 0 {
		o.CompactMapCacheBytes = 16 << 20
	}
	o.fileIO.setDefaults()
}

// Store is the durable event store. It is safe for concurrent use.
type Store struct {
	opts Options
	lock *dirLock
	log  *segmentLog

	// mu guards the index below. The writer goroutine changes the
	// memtable and the cached states, the index worker the tables; both
	// hold mu for writing to do so. Readers, and the writer when it looks
	// a stream up, hold it for reading while they use the index.
	mu sync.RWMutex
	// mem indexes the log from the last checkpoint (or frozen memtable)
	// up to the committed end, mem.to; frozen, if not nil, is being
	// written as a table; tables hold the rest, oldest first.
	mem     *memtable
	frozen  *memtable
	tables  []*table
	cache   *stateCache
	changed chan struct{}
	// posFile holds posCount samples: frame starts before mem (and
	// frozen), lastSample the newest sample of all.
	posFile    *os.File
	posCount   uint64
	lastSample uint64

	// idxDir, ckpt (the last checkpoint written) and the files are the
	// index worker's (Open's before it starts).
	idxDir   string
	ckpt     checkpoint
	flushReq chan struct{}
	idxStop  chan struct{}
	idxDone  chan struct{}

	requests chan *request
	closing  chan struct{}
	done     chan struct{}
	once     sync.Once
	closeErr error

	// failure is set, by the writer only, once a disk failure leaves the
	// log's state unknown; from then on every write is refused.
	failure atomic.Pointer[error]

	replayed uint64

	// scavMu is held by a running scavenge; ckptLastFrame is the last
	// frame the index checkpoint covers, which bounds what it may rewrite.
	scavMu        sync.Mutex
	ckptLastFrame atomic.Uint64
	ckptThrough   atomic.Uint64

	syncs   atomic.Uint64
	writes  atomic.Uint64
	refused atomic.Uint64
}

// Stats are counters of the store's work since it was opened.
type Stats struct {
	// Syncs counts group commits, each one write and one fsync.
	Syncs uint64
	// Writes counts the appends, deletes and tombstones they made durable.
	Writes uint64
	// Refused counts the writes failed because of the disk: a full disk
	// (ErrNoSpace) or a disk failure that made the store stop writing
	// (ErrWriteFailed).
	Refused uint64
	// Replayed is how many bytes of log open read after the index
	// checkpoint (the whole log when there was none).
	Replayed uint64
	// IndexTables is how many index tables are on disk now.
	IndexTables int
	// CachedStreams is how many streams' states the cache holds: at most
	// Options.IndexCacheStreams, whatever the number of streams.
	CachedStreams int
	// CompactMaps, CompactMapRuns and CompactMapBytes are how many
	// position maps of compacted segments the cache holds, their runs and
	// the bytes they take: at most Options.CompactMapCacheBytes, whatever
	// the number of segments or runs.
	CompactMaps     int
	CompactMapRuns  int64
	CompactMapBytes int64
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	tables := len(s.tables)
	s.mu.RUnlock()
	maps, runs, bytes := s.log.maps.stats()
	return Stats{Syncs: s.syncs.Load(), Writes: s.writes.Load(), Refused: s.refused.Load(), Replayed: s.replayed, IndexTables: tables,
		CachedStreams: s.cache.len(), CompactMaps: maps, CompactMapRuns: runs, CompactMapBytes: bytes}
}

// Health returns nil while the store accepts writes, and an error wrapping
// ErrWriteFailed once a disk failure made it refuse them until it is
// reopened; a readiness probe can report it. A full disk does not make the
// store unhealthy: writes fail with ErrNoSpace and succeed again once there
// is space.
func (s *Store) Health() error {
	if err := s.failure.Load(); err != nil {
		return *err
	}
	select {
	case <-s.closing:
		return ErrClosed
	default:
		return nil
	}
}

// fail records a disk failure that stops every later write.
func (s *Store) fail(err error) {
	if !errors.Is(err, ErrWriteFailed) {
		err = errors.Wrapf(ErrWriteFailed, "%v: restart to recover", err)
	}
	s.failure.CompareAndSwap(nil, &err)
}

// refusal is the error for a write while the store is failed, or nil.
func (s *Store) refusal() error {
	if err := s.failure.Load(); err != nil {
		return errors.Wrap(*err, "refusing writes since an earlier disk failure")
	}
	return nil
}

type opKind int

const (
	opAppend opKind = iota
	opDelete
	opTombstone
	// opRoll closes the segment being written (see Scavenge).
	opRoll
)

type request struct {
	op       opKind
	stream   string
	expected Expected
	events   []ProposedEvent
	result   chan response
}

type response struct {
	res WriteResult
	err error
}

// Open opens the store in opts.Dir, creating it if needed, and rebuilds the
// index from the log. It holds the directory's LOCK file until Close, so a
// second Open of the same directory, here or in another process, fails at
// once with ErrLocked.
func Open(opts Options) (*Store, error) {
	if opts.CompactMapCacheBytes < 0 {
		return nil, errors.Wrapf(ErrInvalidRequest, "compact map cache of %d bytes: it must be positive, or 0 for the default", opts.CompactMapCacheBytes)
	}
	opts.setDefaults()
	s := &Store{
		opts:     opts,
		cache:    newStateCache(opts.IndexCacheStreams),
		changed:  make(chan struct{}),
		requests: make(chan *request, 1024),
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		flushReq: make(chan struct{}, 1),
		idxStop:  make(chan struct{}),
		idxDone:  make(chan struct{}),
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, errors.Wrapf(err, "create data directory %s", opts.Dir)
	}
	lock, err := lockDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	log, err := openSegmentLog(opts.Dir, opts.SegmentSize, opts.fileIO, opts.CompactMapCacheBytes)
	if err != nil {
		_ = lock.release()
		return nil, err
	}
	s.lock, s.log = lock, log
	log.sparse, log.crashAt = opts.scavengeSparse, opts.scavengeCrashAt
	if err := s.recover(); err != nil {
		s.closeIndexFiles()
		_ = log.close()
		_ = lock.release()
		return nil, err
	}
	go s.indexWorker()
	go s.writer()
	return s, nil
}

// recover loads the index checkpoint and replays the log after it, writing
// tables as the memtable fills, so that a replay of a long log (no
// checkpoint, or a damaged one) needs no more memory than the live store.
func (s *Store) recover() error {
	from, err := s.openIndex()
	if err != nil {
		return err
	}
	// The newest indexed log is checked too, though not replayed, so that
	// damage to recent writes stops the open with the file and offset
	// named, even after a clean close left nothing to replay. Older log is
	// checked by every read of it.
	window := cmp.Or(s.opts.verifiedLog, verifiedLog)
	verifyFrom, err := s.floorSample(max(from, window) - window)
	if err != nil {
		return err
	}
	if err := s.log.verify(verifyFrom, from); err != nil {
		return err
	}
	start := time.Now()
	frames := 0
	err = s.log.replay(from, s.opts.Logger, func(pos uint64, body []byte, sum uint32) error {
		frames++
		if err := s.applyFrame(pos, body, sum); err != nil {
			return err
		}
		if s.maybeFreeze() {
			<-s.flushReq
			return s.flushFrozen()
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.replayed = s.mem.to - from
	s.opts.Logger.Debug("event store: replayed the log after the index checkpoint",
		"from", from, "to", s.mem.to, "frames", frames, "took", time.Since(start))
	return nil
}

// verifiedLog is how much of the indexed log, at its end, open checks:
// about what one memtable of index entries covers.
const verifiedLog = 32 << 20

// Close stops the writer after the writes already queued, closes the files
// and releases the data directory for another Open. Calling it again does
// nothing.
func (s *Store) Close() error {
	s.once.Do(func() {
		close(s.closing)
		<-s.done
		s.scavMu.Lock() // a scavenge stops at its next check
		defer s.scavMu.Unlock()
		close(s.idxStop)
		<-s.idxDone
		s.flushOnClose()
		s.closeIndexFiles()
		s.closeErr = errors.CombineErrors(s.log.close(), s.lock.release())
	})
	return s.closeErr
}

// Append writes events to stream if expected matches. An append whose event
// ids equal the events already at the expected place succeeds again without
// writing (idempotent retry).
func (s *Store) Append(ctx context.Context, stream string, expected Expected, events []ProposedEvent) (WriteResult, error) {
	if err := s.validateAppend(stream, events); err != nil {
		return WriteResult{}, err
	}
	return s.submit(ctx, &request{op: opAppend, stream: stream, expected: expected, events: events})
}

// QueuedAppend is an append queued by QueueAppend, waiting for its group
// commit.
type QueuedAppend struct {
	s *Store
	// r is req once queued; they are one allocation.
	r   *request
	req request
	err error
}

// QueueAppend validates an append as Append does and queues it for the
// writer, returning as soon as it is queued (it blocks only while the queue
// is full). Appends queued one after another are decided in that order and
// committed together when they arrive together, so a caller with many
// appends in flight (a pipelined client) gets one fsync for all of them.
// Wait returns the result.
func (s *Store) QueueAppend(ctx context.Context, stream string, expected Expected, events []ProposedEvent) *QueuedAppend {
	q := &QueuedAppend{s: s}
	if q.err = s.validateAppend(stream, events); q.err != nil {
		return q
	}
	q.req = request{op: opAppend, stream: stream, expected: expected, events: events, result: make(chan response, 1)}
	r := &q.req
	select {
	case s.requests <- r:
		q.r = r
	case <-s.closing:
		q.err = ErrClosed
	case <-ctx.Done():
		q.err = errors.Wrap(ctx.Err(), "queue write")
	}
	return q
}

// Wait returns the queued append's result once it is durable, or why it was
// refused. Like Append, it is acknowledged only after its fsync; if ctx
// ends first the append may still be committed, and retrying it with the
// same event ids is idempotent.
func (q *QueuedAppend) Wait(ctx context.Context) (WriteResult, error) {
	if q.r == nil {
		return WriteResult{}, q.err
	}
	select {
	case resp := <-q.r.result:
		return resp.res, resp.err
	case <-q.s.done:
		// The writer answers every request it took before it stops.
		select {
		case resp := <-q.r.result:
			return resp.res, resp.err
		default:
			return WriteResult{}, ErrClosed
		}
	case <-ctx.Done():
		return WriteResult{}, errors.Wrap(ctx.Err(), "await write")
	}
}

// AppendRequest is one append of AppendAll.
type AppendRequest struct {
	Stream   string
	Expected Expected
	Events   []ProposedEvent
}

// AppendAll makes the appends in order, as Append would one after another,
// but queues them all at once so that the writer commits them in large
// batches; it is for bulk loads such as importing a history. It returns
// each append's result and error.
func (s *Store) AppendAll(ctx context.Context, appends []AppendRequest) ([]WriteResult, []error) {
	results := make([]WriteResult, len(appends))
	errs := make([]error, len(appends))
	reqs := make([]*request, len(appends))
	for i, a := range appends {
		if errs[i] = s.validateAppend(a.Stream, a.Events); errs[i] != nil {
			continue
		}
		r := &request{op: opAppend, stream: a.Stream, expected: a.Expected, events: a.Events, result: make(chan response, 1)}
		select {
		case s.requests <- r:
			reqs[i] = r
		case <-s.closing:
			errs[i] = ErrClosed
		case <-ctx.Done():
			errs[i] = errors.Wrap(ctx.Err(), "queue write")
		}
	}
	for i, r := range reqs {
		if r != nil {
			resp := <-r.result
			results[i], errs[i] = resp.res, resp.err
		}
	}
	return results, errs
}

// Delete soft-deletes stream: it reads as not found until appended to again,
// and its revisions continue where they were.
func (s *Store) Delete(ctx context.Context, stream string, expected Expected) (WriteResult, error) {
	if err := validateStreamName(stream); err != nil {
		return WriteResult{}, err
	}
	return s.submit(ctx, &request{op: opDelete, stream: stream, expected: expected})
}

// Tombstone deletes stream for good: every later read or write of it fails
// with ErrStreamDeleted.
func (s *Store) Tombstone(ctx context.Context, stream string, expected Expected) (WriteResult, error) {
	if err := validateStreamName(stream); err != nil {
		return WriteResult{}, err
	}
	return s.submit(ctx, &request{op: opTombstone, stream: stream, expected: expected})
}

func validateStreamName(stream string) error {
	if stream == "" {
		return errors.Wrap(ErrInvalidRequest, "stream name is empty")
	}
	if stream == "$all" {
		return errors.Wrap(ErrInvalidRequest, "$all cannot be written to")
	}
	return nil
}

func (s *Store) validateAppend(stream string, events []ProposedEvent) error {
	if err := validateStreamName(stream); err != nil {
		return err
	}
	for i := range events {
		e := &events[i]
		if e.Type == "" {
			return errors.Wrapf(ErrInvalidRequest, "event %d has no type", i)
		}
		if size := len(e.Data) + len(e.Metadata); size > s.opts.MaxEventSize {
			return errors.Wrapf(ErrInvalidRequest, "event %d is %d bytes, over the limit of %d", i, size, s.opts.MaxEventSize)
		}
	}
	return nil
}

func (s *Store) submit(ctx context.Context, r *request) (WriteResult, error) {
	r.result = make(chan response, 1)
	select {
	case s.requests <- r:
	case <-s.closing:
		return WriteResult{}, ErrClosed
	case <-ctx.Done():
		return WriteResult{}, errors.Wrap(ctx.Err(), "queue write")
	}
	select {
	case resp := <-r.result:
		return resp.res, resp.err
	case <-ctx.Done():
		// The write may still be committed; the caller can retry it
		// idempotently with the same event ids.
		return WriteResult{}, errors.Wrap(ctx.Err(), "await write")
	}
}

// pendingStream is a stream's state as seen by the writer inside one batch,
// including the batch's earlier writes that are not yet on disk.
type pendingStream struct {
	last       int64
	tombstoned bool
	meta       streamMeta
	// touched is set once the batch writes to the stream, after which the
	// committed index no longer describes it.
	touched bool
}

func (p *pendingStream) current() int64 {
	if p.meta.truncateBefore > 0 && int64(p.meta.truncateBefore) > p.last {
		return NoStream
	}
	return p.last
}

// batch is one group commit: the frames to write and the answers to give
// once they are durable.
type batch struct {
	head    uint64
	buf     []byte
	frames  []int
	pending map[string]*pendingStream
	reqs    []*request
	results []response
	// noSpace is set when the batch could not start a new segment for lack
	// of space: it fails every write of the batch, and the next batch tries
	// again.
	noSpace error
}

func (s *Store) writer() {
	defer close(s.done)
	b := &batch{pending: map[string]*pendingStream{}}
	for {
		select {
		case r := <-s.requests:
			s.startBatch(b)
			s.prepare(b, r)
		case <-s.closing:
			s.drainClosed()
			return
		}
		s.fill(b)
		// Let the goroutines that are ready to append (those the last
		// commit answered, say) queue their requests before this batch is
		// committed: without it, appenders in the same process, each
		// woken by its answer, reach the queue one at a time and every
		// commit carries one or two of them.
		runtime.Gosched()
		s.fill(b)
		s.commit(b)
	}
}

// fill adds the requests queued now to the batch, up to its size.
func (s *Store) fill(b *batch) {
	for len(b.buf) < s.opts.MaxBatchBytes {
		select {
		case r := <-s.requests:
			s.prepare(b, r)
		default:
			return
		}
	}
}

func (s *Store) startBatch(b *batch) {
	b.buf, b.frames, b.reqs, b.results = b.buf[:0], b.frames[:0], b.reqs[:0], b.results[:0]
	clear(b.pending)
	b.noSpace = nil
	if s.refusal() == nil {
		if err := s.log.rollIfFull(); errors.Is(err, ErrNoSpace) {
			b.noSpace = err
		} else if err != nil {
			s.fail(err)
		}
	}
	b.head = s.log.head()
}

// drainClosed fails the requests still queued at close.
func (s *Store) drainClosed() {
	for {
		select {
		case r := <-s.requests:
			r.result <- response{err: ErrClosed}
		default:
			return
		}
	}
}

// view returns the batch's picture of a stream, looking up its committed
// state in the index the first time.
func (s *Store) view(b *batch, name string) (*pendingStream, error) {
	if p, ok := b.pending[name]; ok {
		return p, nil
	}
	s.mu.RLock()
	st, err := s.state(name)
	s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	p := &pendingStream{last: st.last, tombstoned: st.tombstoned, meta: st.meta}
	b.pending[name] = p
	return p, nil
}

func expectationMet(exp Expected, current int64) bool {
	switch exp.Kind {
	case ExpectNoStream:
		return current == NoStream
	case ExpectStreamExists:
		return current != NoStream
	case ExpectRevision:
		return current == int64(exp.Revision)
	default:
		return true
	}
}

// prepare decides one request against the batch's view and, if it writes,
// encodes its frame into the batch.
func (s *Store) prepare(b *batch, r *request) {
	b.reqs = append(b.reqs, r)
	res, err := s.decide(b, r)
	b.results = append(b.results, response{res: res, err: err})
}

func (s *Store) decide(b *batch, r *request) (WriteResult, error) {
	if r.op == opRoll {
		return WriteResult{}, s.roll()
	}
	if err := s.refusal(); err != nil {
		s.refused.Add(1)
		return WriteResult{}, err
	}
	if b.noSpace != nil {
		s.refused.Add(1)
		return WriteResult{}, b.noSpace
	}
	p, err := s.view(b, r.stream)
	if err != nil {
		return WriteResult{}, err
	}
	if p.tombstoned {
		return WriteResult{}, &StreamDeletedError{Stream: r.stream}
	}
	if r.op == opAppend && !p.touched && r.expected.Kind != ExpectRevision && r.expected.Kind != ExpectNoStream {
		if res, ok, err := s.alreadyWritten(r.stream, r.expected, r.events); err != nil || ok {
			return res, err
		}
	}
	if !expectationMet(r.expected, p.current()) {
		if r.op == opAppend && !p.touched {
			if res, ok, err := s.alreadyWritten(r.stream, r.expected, r.events); err != nil || ok {
				return res, err
			}
		}
		return WriteResult{}, &WrongExpectedVersionError{Stream: r.stream, Expected: r.expected, Current: p.current()}
	}
	switch r.op {
	case opTombstone:
		pos := b.head + uint64(len(b.buf))
		b.frames = append(b.frames, len(b.buf))
		b.buf = encodeTombstone(b.buf, r.stream)
		p.tombstoned, p.touched = true, true
		return WriteResult{Revision: p.current(), Position: pos}, nil
	case opDelete:
		if p.last == NoStream {
			return WriteResult{Revision: NoStream}, nil
		}
		raw := make(map[string]any, len(p.meta.raw)+1)
		for k, v := range p.meta.raw {
			raw[k] = v
		}
		raw["$tb"] = p.last + 1
		data, err := json.Marshal(raw)
		if err != nil {
			return WriteResult{}, errors.Wrap(err, "encode stream metadata")
		}
		var id [16]byte
		_, _ = rand.Read(id[:])
		id[6], id[8] = id[6]&0x0f|0x40, id[8]&0x3f|0x80
		meta := ProposedEvent{ID: id, Type: MetadataEventType, ContentType: "application/json", Data: data}
		pos, err := s.encodeAppend(b, MetadataStreamOf(r.stream), []ProposedEvent{meta})
		return WriteResult{Revision: p.last, Position: pos}, err
	default:
		if len(r.events) == 0 {
			return WriteResult{Revision: p.current()}, nil
		}
		pos, err := s.encodeAppend(b, r.stream, r.events)
		return WriteResult{Revision: p.last, Position: pos}, err
	}
}

// MetadataEventType is the type of the events that carry stream metadata.
const MetadataEventType = "$metadata"

// MetadataStreamOf names the stream holding stream's metadata.
func MetadataStreamOf(stream string) string { return "$$" + stream }

// encodeAppend adds an append frame to the batch, advances the stream's view
// and returns the position of the last event.
func (s *Store) encodeAppend(b *batch, stream string, events []ProposedEvent) (uint64, error) {
	p, err := s.view(b, stream)
	if err != nil {
		return 0, err
	}
	var target *pendingStream
	if isMetadataStream(stream) {
		// Look the target up before writing anything, so that a failed
		// lookup leaves the batch as it was.
		if target, err = s.view(b, stream[2:]); err != nil {
			return 0, err
		}
	}
	start := len(b.buf)
	var offsets []int
	b.frames = append(b.frames, start)
	b.buf, offsets = encodeAppend(b.buf, stream, uint64(p.last+1), s.opts.Now().UnixNano(), events)
	p.last += int64(len(events))
	p.touched = true
	if isMetadataStream(stream) {
		for i := len(events) - 1; i >= 0; i-- {
			if events[i].Type == MetadataEventType {
				target.meta = parseMeta(events[i].Data)
				target.touched = true
				break
			}
		}
	}
	return b.head + uint64(start+offsets[len(offsets)-1]), nil
}

// alreadyWritten reports whether events are exactly the committed events at
// the place the expectation names, which makes a retried append a no-op.
func (s *Store) alreadyWritten(stream string, exp Expected, events []ProposedEvent) (WriteResult, bool, error) {
	if len(events) == 0 {
		return WriteResult{}, false, nil
	}
	s.mu.RLock()
	st, err := s.state(stream)
	if err != nil {
		s.mu.RUnlock()
		return WriteResult{}, false, err
	}
	n := st.last + 1
	var start int64
	switch exp.Kind {
	case ExpectRevision:
		start = int64(exp.Revision) + 1
	case ExpectNoStream:
		start = 0
	default:
		start = n - int64(len(events))
	}
	if start < 0 || start+int64(len(events)) > n {
		s.mu.RUnlock()
		return WriteResult{}, false, nil
	}
	found, err := s.entriesOf(stream, uint64(start), uint64(start)+uint64(len(events))-1)
	s.mu.RUnlock()
	if err != nil {
		return WriteResult{}, false, err
	}
	got, err := s.eventsAt(stream, found)
	if err != nil {
		return WriteResult{}, false, err
	}
	if len(got) != len(events) {
		if s.log.skipped.Load() {
			return WriteResult{}, false, nil // some were scavenged
		}
		return WriteResult{}, false, errors.Wrapf(ErrCorrupt, "index of %q lacks revisions %d..%d", stream, start, start+int64(len(events))-1)
	}
	for i := range events {
		if got[i].ID != events[i].ID {
			return WriteResult{}, false, nil
		}
	}
	last := got[len(got)-1]
	return WriteResult{Revision: int64(last.Revision), Position: last.Position}, true, nil
}

// commit makes the batch durable with one write and one fsync, publishes it
// to readers and answers every request.
func (s *Store) commit(b *batch) {
	if len(b.buf) > 0 {
		if err := s.log.write(b.buf); err != nil {
			if !errors.Is(err, ErrNoSpace) {
				s.fail(err)
			}
			for i := range b.results {
				if b.results[i].err == nil {
					b.results[i] = response{err: err}
					s.refused.Add(1)
				}
			}
		} else {
			s.publish(b)
			s.syncs.Add(1)
			s.writes.Add(uint64(len(b.frames)))
		}
	}
	for i, r := range b.reqs {
		r.result <- b.results[i]
	}
}

func (s *Store) publish(b *batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, start := range b.frames {
		end := len(b.buf)
		if i+1 < len(b.frames) {
			end = b.frames[i+1]
		}
		sum := binary.LittleEndian.Uint32(b.buf[start+4:])
		if err := s.applyFrame(b.head+uint64(start), b.buf[start+frameHeaderSize:end], sum); err != nil {
			// The frame was encoded by this process a moment ago; failing to
			// decode it is a bug, and the index can no longer be trusted.
			s.fail(errors.Wrap(err, "apply committed frame"))
		}
	}
	s.maybeFreeze()
	close(s.changed)
	s.changed = make(chan struct{})
}

// applyFrame adds one durable frame at log offset pos, with checksum sum,
// to the index. Open (replay) and commit (live) both use it, so a rebuilt
// index equals the live one. The caller holds s.mu for writing (or is Open).
func (s *Store) applyFrame(pos uint64, body []byte, sum uint32) error {
	d := decoder{b: body}
	switch d.byte() {
	case kindAppend:
		f, err := decodeAppend(&d)
		if err != nil {
			return errors.Wrapf(ErrCorrupt, "append frame at %d: %v", pos, err)
		}
		st, err := s.state(f.stream)
		if err != nil {
			return err
		}
		// Scavenge may have removed a stream's oldest frames (never its
		// newest), so a replay can meet a stream first past revision 0.
		gap := f.firstRevision > uint64(st.last+1) && s.log.skipped.Load()
		if f.firstRevision != uint64(st.last+1) && !gap {
			return errors.Wrapf(ErrCorrupt, "frame at %d writes %s@%d, expected @%d", pos, f.stream, f.firstRevision, st.last+1)
		}
		var meta []byte
		for i, span := range f.events {
			raw := body[span.offset : span.offset+span.length]
			ed := decoder{b: raw}
			ed.fixed(16)
			typ := ed.bytes()
			if ed.err != nil {
				return errors.Wrapf(ErrCorrupt, "event %d of frame at %d", i, pos)
			}
			if string(typ) == MetadataEventType && isMetadataStream(f.stream) {
				ev, err := decodeEvent(raw, nil)
				if err != nil {
					return errors.Wrapf(ErrCorrupt, "metadata event of frame at %d", pos)
				}
				meta = ev.Data
			}
		}
		if len(f.events) > 0 {
			s.mem.addEvents(f.stream, f.firstRevision, len(f.events), pos)
			st.last = int64(f.firstRevision) + int64(len(f.events)) - 1
			s.mem.lastEvent = pos + frameHeaderSize + uint64(f.events[len(f.events)-1].offset)
			s.mem.hasEvent = true
		}
		if meta != nil {
			// An uncached target reads its metadata from the index when it
			// is next looked up.
			if target := s.cache.get(f.stream[2:]); target != nil {
				target.meta = parseMeta(meta)
			}
		}
	case kindStub:
		stream, rev, _, err := decodeStub(&d)
		if err != nil {
			return errors.Wrapf(ErrCorrupt, "stub frame at %d: %v", pos, err)
		}
		st, err := s.state(stream)
		if err != nil {
			return err
		}
		if int64(rev) <= st.last {
			return errors.Wrapf(ErrCorrupt, "frame at %d writes %s@%d, expected past @%d", pos, stream, rev, st.last)
		}
		s.mem.addEvents(stream, rev, 1, pos)
		st.last = int64(rev)
	case kindTombstone:
		name := d.bytes()
		if d.err != nil {
			return errors.Wrapf(ErrCorrupt, "tombstone frame at %d", pos)
		}
		st, err := s.state(string(name))
		if err != nil {
			return err
		}
		st.tombstoned = true
		s.mem.addTombstone(st.name, pos)
	default:
		return errors.Wrapf(ErrCorrupt, "unknown frame kind at %d", pos)
	}
	s.mem.to = pos + frameHeaderSize + uint64(len(body))
	s.mem.lastFrame, s.mem.lastSum = pos, sum
	if pos >= s.lastSample+sampleGap {
		s.mem.samples = append(s.mem.samples, pos)
		s.lastSample = pos
	}
	return nil
}
