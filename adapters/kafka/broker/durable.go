package broker

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sagaengine/saga/domain/protocol"
)

// errNotDurable marks the failure of an fsync that produces to synced topics
// waited for. Their connections are closed instead of acknowledging them,
// and after such a failure the broker acknowledges no more produces to
// synced topics until it is restarted: the kernel may have dropped the dirty
// pages, so a later fsync that succeeds would prove nothing.
var errNotDurable = errors.New("kafka: fsync failed, produces to synced topics are no longer acknowledged")

// Durable acknowledgement, the design.
//
// kfake writes every produced batch to its segment file (write(2), so the
// page cache) inside handleProduce, before it builds the response, and it
// has no hook between the two; its file system is unexported, and its only
// fsync option, SyncWrites, fsyncs every batch of every topic one after the
// other. So the durability is added on the wire instead: every connection
// the broker accepts is wrapped (kfake.ListenFn gives us the listener).
//
//   - The read side parses the request frames (int32 size, int16 key, int16
//     version, int32 correlation id, client id, tagged fields when flexible)
//     and decodes Produce requests with kmsg, exactly as kfake does. For a
//     request with acks != 0 that writes to a synced topic it remembers the
//     correlation id and the partitions. This happens before kfake has read
//     the request's last byte, so before kfake can answer it.
//   - The write side parses the response frames (int32 size, int32
//     correlation id). Before the first byte of a remembered response goes
//     to the socket it waits until the partitions' files are fsynced. kfake
//     answers one request per connection at a time, so holding a response
//     holds only that connection.
//   - The fsyncs are group commits: a waiter joins the round that has not
//     started yet; one goroutine carries out rounds one after another, and a
//     round fsyncs every segment and index file of its partitions that grew
//     (or is new) since it was last fsynced, all files at once.
//   - A round costs little besides the fsyncs. The files' fds stay open
//     from round to round (any fd flushes the inode), up to maxOpenFiles(),
//     closing those of the partitions used least recently. A file grew if
//     fstat on its fd says so. The partition directory is listed again only
//     when its modification time changed since the last listing, which
//     every file created, removed or replaced (compaction) does, or when
//     that listing could have missed a change (see partition). Files are
//     flushed with fdatasync, which skips only the metadata not needed to
//     read the data back (times), so a file's new size is made durable too.
//   - A new segment or index file has its directory fsynced once; a new
//     partition directory also has partitions/ and the data directory
//     fsynced (the latter also makes kfake's topics.json rename durable, so
//     the topic is known at reopen).
//
// The option rejected: kfake.Cluster.ControlKey runs before a request is
// handled and cannot delay the response after it, so it cannot fsync after
// the write.
type syncer struct {
	dir    string
	logger *slog.Logger
	match  func(topic string) bool
	// topicOf resolves the topic IDs of Produce v13 requests.
	topicOf atomic.Pointer[func([16]byte) (string, bool)]
	closed  atomic.Bool

	mu      sync.Mutex
	next    *syncRound // the round new waiters join; nil when none
	running bool       // a goroutine is carrying out rounds
	failed  error      // sticky fsync failure
	// barrier says produces to protocol.SyncBarrierTopic are synced: each
	// is then acknowledged only once every partition written before it is
	// on stable storage. written holds the partitions of unsynced topics
	// whose produces were answered since the last barrier round took them.
	barrier bool
	written map[topicPartition]struct{}

	shut bool // the broker is closed: close the fds when rounds stop

	// Touched only by the goroutine carrying out rounds, by shutdown when
	// none runs, and by tests once the broker is closed.
	parts   map[topicPartition]*partitionFiles
	open    int   // cached fds
	maxOpen int   // at most this many cached fds after a round
	round   int64 // rounds carried out, to find the partitions used least recently
	// syncFile flushes a segment or index file: fdatasync; tests make it
	// fail.
	syncFile func(*os.File) error

	ids   sync.Mutex
	names map[[16]byte]string

	rounds atomic.Int64
	hooks  syncHooks
}

// syncHooks let tests watch and pace the sync layer.
type syncHooks struct {
	// joined runs after a produce's response joined a round.
	joined func()
	// round runs before a round's fsyncs, with its partitions.
	round func(parts []topicPartition)
	// synced runs after a file was fsynced, with its size before the fsync.
	synced func(path string, size int64)
	// dirSynced runs after a directory was fsynced.
	dirSynced func(path string)
	// listed runs before a partition directory is listed.
	listed func(dir string)
}

// maxOpenFiles bounds the fds the sync layer keeps open between rounds.
// Where an open file cannot be removed (Windows), it keeps none, so kfake
// can always remove segments.
func maxOpenFiles() int {
	if runtime.GOOS == "windows" {
		return 0
	}
	return 256
}

// racyWindow is how long after a directory's modification time a listing
// of it is trusted to hold every change the time covers; it exceeds the
// coarsest granularity of file system times (FAT's 2 s).
const racyWindow = 3 * time.Second

type topicPartition struct {
	topic string
	part  int32
}

// partitionFiles is what the sync layer knows of a partition directory.
type partitionFiles struct {
	dir   string
	files map[string]*segmentFile // by name
	// dirInfo is the directory as last listed; nil before the first
	// listing.
	dirInfo os.FileInfo
	// listed says files holds an open fd for every file of that listing;
	// false after eviction.
	listed bool
	// trusted says the listing came late enough after the directory's
	// modification time to have seen every change that time covers.
	trusted bool
	// dirSynced says the directory's own entry, in partitions/, is
	// durable; newEntry says an entry in it is new since its last fsync.
	dirSynced, newEntry bool
	used                int64 // the last round that synced the partition
}

// segmentFile is a segment or index file, with its fd while cached.
type segmentFile struct {
	path   string
	f      *os.File
	info   os.FileInfo // of the file f is or was open on
	synced int64       // size at the last fsync; -1 before the first
}

type syncRound struct {
	parts map[topicPartition]struct{}
	all   bool // a barrier waits: sync the partitions written too
	done  chan struct{}
	err   error
}

func newSyncer(dir string, match func(string) bool, logger *slog.Logger) *syncer {
	return &syncer{
		dir: dir, match: match, logger: logger,
		parts: map[topicPartition]*partitionFiles{}, names: map[[16]byte]string{},
		maxOpen: maxOpenFiles(), syncFile: fdatasync,
		barrier: match(protocol.SyncBarrierTopic), written: map[topicPartition]struct{}{},
	}
}

// answered notes that produces to the partitions of unsynced topics were
// written and are being answered, so that the next barrier round syncs
// them. It is called as the answer goes out, never before kfake wrote the
// records: a barrier produced after that answer was received finds them.
func (s *syncer) answered(parts []topicPartition) {
	s.mu.Lock()
	for _, p := range parts {
		s.written[p] = struct{}{}
	}
	s.mu.Unlock()
}

// wait returns once every byte written to the partitions' files before it
// was called is on stable storage; with all, also every byte written to
// the partitions of answered produces of unsynced topics (a barrier).
func (s *syncer) wait(parts []topicPartition, all bool) error {
	s.mu.Lock()
	if s.failed != nil {
		s.mu.Unlock()
		return s.failed
	}
	r := s.next
	if r == nil {
		r = &syncRound{parts: map[topicPartition]struct{}{}, done: make(chan struct{})}
		s.next = r
	}
	for _, p := range parts {
		r.parts[p] = struct{}{}
	}
	r.all = r.all || all
	if !s.running {
		s.running = true
		go s.run()
	}
	s.mu.Unlock()
	if s.hooks.joined != nil {
		s.hooks.joined()
	}
	<-r.done
	return r.err
}

// shutdown closes the cached fds once no round runs; a round still under
// way closes them when it ends.
func (s *syncer) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shut = true
	if !s.running {
		s.closeFiles()
	}
}

func (s *syncer) run() {
	for {
		s.mu.Lock()
		r := s.next
		if r == nil {
			s.running = false
			if s.shut {
				s.closeFiles()
			}
			s.mu.Unlock()
			return
		}
		s.next = nil
		failed := s.failed
		if r.all {
			// Everything answered before the barrier joined this round.
			for p := range s.written {
				r.parts[p] = struct{}{}
			}
			clear(s.written)
		}
		s.mu.Unlock()

		if failed != nil {
			r.err = failed
		} else if err := s.syncParts(r.parts); err != nil {
			s.logger.Error("kafka broker: fsync failed; produces to synced topics are refused until restart", "err", err.Error())
			r.err = errors.Mark(err, errNotDurable)
			s.mu.Lock()
			s.failed = r.err
			s.mu.Unlock()
		}
		s.rounds.Add(1)
		close(r.done)
	}
}

// syncParts fsyncs the files of the partitions that changed since they were
// last fsynced, and the directory entries of new files.
func (s *syncer) syncParts(parts map[topicPartition]struct{}) error {
	list := make([]topicPartition, 0, len(parts))
	for p := range parts {
		list = append(list, p)
	}
	if s.hooks.round != nil {
		s.hooks.round(list)
	}
	s.round++
	type job struct {
		file *segmentFile
		size int64
	}
	var (
		jobs []job
		dirs []string
		top  bool // partitions/ and the data directory
	)
	for _, p := range list {
		ps, err := s.partition(p)
		if err != nil {
			return err
		}
		if ps == nil {
			continue // nothing was written: the produce failed
		}
		for _, f := range ps.files {
			if f.f == nil {
				continue // removed since the listing
			}
			info, err := f.f.Stat()
			if err != nil {
				return errors.Wrapf(err, "stat %s", f.path)
			}
			if size := info.Size(); size != f.synced {
				jobs = append(jobs, job{f, size})
			}
		}
		if ps.newEntry {
			dirs = append(dirs, ps.dir)
		}
		if !ps.dirSynced {
			top = true
		}
	}
	if top {
		dirs = append(dirs, filepath.Join(s.dir, "partitions"), s.dir)
	}

	errs := make([]error, len(jobs)+len(dirs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() { errs[i] = errors.Wrapf(s.syncFile(j.file.f), "fdatasync %s", j.file.path) })
	}
	for i, d := range dirs {
		wg.Go(func() { errs[len(jobs)+i] = fsyncPath(d) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, j := range jobs {
		j.file.synced = j.size
		if s.hooks.synced != nil {
			s.hooks.synced(j.file.path, j.size)
		}
	}
	for _, d := range dirs {
		if s.hooks.dirSynced != nil {
			s.hooks.dirSynced(d)
		}
	}
	for _, p := range list {
		if ps := s.parts[p]; ps != nil {
			ps.newEntry, ps.dirSynced = false, true
		}
	}
	s.evict()
	return nil
}

// partition brings a partition's state up to date with its directory: it
// re-lists the directory only when the directory changed since the last
// listing (or that listing could have missed a change), opening new files
// and reopening replaced ones. It returns nil when the directory does not
// exist.
//
// A file is created, removed or replaced in a directory only by changing
// the directory's entries, which sets the directory's modification time
// (POSIX requires it), so an unchanged time means the names and files are
// those of the last listing. The time has a granularity (a clock tick on
// Linux, 2 s on FAT), so a change right after a listing could leave it as it
// was; a listing made less than racyWindow after the time it read is
// therefore not trusted, and the next round lists again (git's "racy git"
// rule). This assumes the file system stamps the directory with this host's
// clock, as local file systems do.
func (s *syncer) partition(p topicPartition) (*partitionFiles, error) {
	ps := s.parts[p]
	if ps == nil {
		ps = &partitionFiles{dir: partitionDir(s.dir, p.topic, p.part), files: map[string]*segmentFile{}}
	}
	ps.used = s.round
	now := time.Now()
	info, err := os.Stat(ps.dir)
	if errors.Is(err, os.ErrNotExist) {
		s.forget(p, ps)
		return nil, nil
	}
	if err != nil {
		return nil, errors.Wrapf(err, "stat %s", ps.dir)
	}
	s.parts[p] = ps
	if ps.listed && ps.trusted && os.SameFile(ps.dirInfo, info) && ps.dirInfo.ModTime().Equal(info.ModTime()) {
		return ps, nil
	}
	if ps.dirInfo != nil && !os.SameFile(ps.dirInfo, info) {
		// The partition was deleted and created again: a new directory.
		ps.dirSynced = false
	}
	if s.hooks.listed != nil {
		s.hooks.listed(ps.dir)
	}
	entries, err := os.ReadDir(ps.dir)
	if errors.Is(err, os.ErrNotExist) {
		s.forget(p, ps)
		return nil, nil
	}
	if err != nil {
		return nil, errors.Wrapf(err, "list %s", ps.dir)
	}
	if !ps.dirSynced {
		ps.newEntry = true // a new directory: fsync it once whatever it holds
	}
	present := make(map[string]bool, len(entries))
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".dat") && !strings.HasSuffix(name, ".idx") {
			continue
		}
		present[name] = true
		if err := s.refresh(ps, name); err != nil {
			return nil, err
		}
	}
	for name, f := range ps.files {
		if !present[name] {
			s.closeFile(f)
			delete(ps.files, name)
		}
	}
	ps.dirInfo, ps.listed = info, true
	ps.trusted = now.Sub(info.ModTime()) >= racyWindow
	return ps, nil
}

// refresh makes sure the partition's file name is open on the file the
// name is now, keeping an fd that is still on it. A file that is new, or
// replaced since (kfake's compaction removes segments and writes them
// again under the same names), gets its directory entry fsynced.
func (s *syncer) refresh(ps *partitionFiles, name string) error {
	path := filepath.Join(ps.dir, name)
	f := ps.files[name]
	if f != nil && f.f != nil {
		info, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			s.closeFile(f)
			delete(ps.files, name)
			return nil // removed since the listing: the next round lists again
		}
		if err != nil {
			return errors.Wrapf(err, "stat %s", path)
		}
		if os.SameFile(f.info, info) {
			return nil
		}
		s.closeFile(f)
	}
	fd, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		delete(ps.files, name)
		return nil
	}
	if err != nil {
		return errors.Wrapf(err, "open %s to fsync", path)
	}
	info, err := fd.Stat()
	if err != nil {
		fd.Close()
		return errors.Wrapf(err, "stat %s", path)
	}
	s.open++
	if f != nil && os.SameFile(f.info, info) {
		f.f = fd // reopened after eviction: its synced size still holds
		return nil
	}
	ps.files[name] = &segmentFile{path: path, f: fd, info: info, synced: -1}
	ps.newEntry = true
	return nil
}

// closeFile closes a cached fd, keeping what is known of the file.
func (s *syncer) closeFile(f *segmentFile) {
	if f.f != nil {
		f.f.Close()
		f.f = nil
		s.open--
	}
}

// forget drops a partition whose directory is gone.
func (s *syncer) forget(p topicPartition, ps *partitionFiles) {
	for _, f := range ps.files {
		s.closeFile(f)
	}
	delete(s.parts, p)
}

// evict closes the fds of the partitions used least recently until at most
// maxOpen are open. An evicted partition keeps its files' identities and
// synced sizes, and lists its directory again when next used.
func (s *syncer) evict() {
	if s.open <= s.maxOpen {
		return
	}
	byUse := make([]*partitionFiles, 0, len(s.parts))
	for _, ps := range s.parts {
		if ps.listed {
			byUse = append(byUse, ps)
		}
	}
	slices.SortFunc(byUse, func(a, b *partitionFiles) int { return cmp.Compare(a.used, b.used) })
	for _, ps := range byUse {
		if s.open <= s.maxOpen {
			return
		}
		for _, f := range ps.files {
			s.closeFile(f)
		}
		ps.listed = false
	}
}

// closeFiles closes every cached fd; the goroutine carrying out rounds
// must not be running.
func (s *syncer) closeFiles() {
	for _, ps := range s.parts {
		for _, f := range ps.files {
			s.closeFile(f)
		}
		ps.listed = false
	}
}

// fsyncPath fsyncs a file or directory by path. One removed meanwhile is
// skipped: a partition deleted takes its files along.
func fsyncPath(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return errors.Wrapf(err, "open %s to fsync", path)
	}
	defer f.Close()
	return errors.Wrapf(f.Sync(), "fsync %s", path)
}

// partitionDir is where kfake keeps a partition's segments (kfake's partDir).
func partitionDir(dataDir, topic string, part int32) string {
	return filepath.Join(dataDir, "partitions", fmt.Sprintf("%s-%d", url.PathEscape(topic), part))
}

// produceParts returns what the sync layer must do for a Produce request
// body (the frame after its size) that wants an acknowledgement: the
// partitions of synced topics it writes to, whether one is the barrier
// topic's, and, when barriers are synced, the partitions of the other
// topics.
func (s *syncer) produceParts(body []byte) (int32, producePending) {
	r := kbin.Reader{Src: body}
	key := r.Int16()
	version := r.Int16()
	corr := r.Int32()
	r.NullableString() // client id
	var pp producePending
	if key != 0 || !r.Ok() {
		return corr, pp
	}
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := req.ReadFrom(r.Src); err != nil || req.Acks == 0 {
		return corr, pp // kfake fails the connection, or sends no answer
	}
	for _, t := range req.Topics {
		topic := t.Topic
		if version >= 13 {
			var ok bool
			if topic, ok = s.topicName(t.TopicID); !ok {
				continue // kfake answers UNKNOWN_TOPIC_ID
			}
		}
		synced := s.match(topic)
		if !synced && (!s.barrier || !barrierCovers(topic)) {
			continue
		}
		pp.barrier = pp.barrier || (synced && topic == protocol.SyncBarrierTopic)
		for _, p := range t.Partitions {
			if synced {
				pp.synced = append(pp.synced, topicPartition{topic, p.Partition})
			} else {
				pp.written = append(pp.written, topicPartition{topic, p.Partition})
			}
		}
	}
	return corr, pp
}

// barrierCovers reports whether a barrier makes an unsynced topic's records
// durable: every topic but those whose records recovery re-derives without
// reading them back (commands, replies, heartbeats), which would only add
// files to fsync. Status and reply topics are what barriers are for; a
// reply topic may have any name the reply topic pattern allows.
func barrierCovers(topic string) bool {
	return !strings.HasPrefix(topic, protocol.CommandTopicPrefix) && topic != protocol.RepliesTopic && topic != protocol.AgentsTopic
}

// producePending is what a produce's answer waits for, or notes, before it
// goes out.
type producePending struct {
	synced  []topicPartition // fsynced before the answer
	written []topicPartition // noted for the next barrier (syncer.answered)
	barrier bool             // a barrier: everything answered before it is fsynced too
}

func (s *syncer) topicName(id [16]byte) (string, bool) {
	s.ids.Lock()
	name, ok := s.names[id]
	s.ids.Unlock()
	if ok {
		return name, true
	}
	lookup := s.topicOf.Load()
	if lookup == nil || s.closed.Load() {
		return "", false
	}
	if name, ok = (*lookup)(id); ok {
		s.ids.Lock()
		s.names[id] = name
		s.ids.Unlock()
	}
	return name, ok
}

// syncConn is a broker-side connection that holds the responses to produces
// on synced topics until their data is fsynced.
type syncConn struct {
	net.Conn
	s *syncer

	mu      sync.Mutex
	pending map[int32]producePending

	// Read side, used only by kfake's reading goroutine.
	rhdr   [6]byte // size and key of the request frame being read
	rn     int
	rleft  int
	rbody  []byte
	rkeep  bool
	rready bool

	// Write side, used only by kfake's writing goroutine.
	whdr  []byte // the start of a response frame, until its correlation id
	wleft int    // bytes of the current response frame still to pass
}

func (c *syncConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.scanRequests(p[:n])
	return n, err
}

// scanRequests follows the request frames through b, keeping whole Produce
// frames to decode them.
func (c *syncConn) scanRequests(b []byte) {
	for len(b) > 0 || c.rready {
		if !c.rready {
			k := copy(c.rhdr[c.rn:], b)
			c.rn += k
			b = b[k:]
			if c.rn < len(c.rhdr) {
				return
			}
			size := int(binary.BigEndian.Uint32(c.rhdr[:4]))
			c.rkeep = binary.BigEndian.Uint16(c.rhdr[4:6]) == 0
			c.rleft = max(size-2, 0)
			c.rbody = c.rbody[:0]
			if c.rkeep {
				c.rbody = append(c.rbody, c.rhdr[4:6]...)
			}
			c.rready = true
		}
		k := min(c.rleft, len(b))
		if c.rkeep {
			c.rbody = append(c.rbody, b[:k]...)
		}
		c.rleft -= k
		b = b[k:]
		if c.rleft > 0 {
			return
		}
		if c.rkeep {
			if corr, pp := c.s.produceParts(c.rbody); len(pp.synced) > 0 || len(pp.written) > 0 {
				c.mu.Lock()
				if c.pending == nil {
					c.pending = map[int32]producePending{}
				}
				c.pending[corr] = pp
				c.mu.Unlock()
			}
			if cap(c.rbody) > 1<<20 {
				c.rbody = nil // do not keep a large produce's buffer per connection
			}
		}
		c.rn, c.rready = 0, false
	}
}

func (c *syncConn) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if c.wleft > 0 {
			n, err := c.Conn.Write(p[:min(c.wleft, len(p))])
			written += n
			c.wleft -= n
			p = p[n:]
			if err != nil {
				return written, err
			}
			continue
		}
		// A new response frame: learn its correlation id first.
		var hdr []byte
		if len(c.whdr) == 0 && len(p) >= 8 {
			hdr = p[:8]
		} else {
			k := min(8-len(c.whdr), len(p))
			c.whdr = append(c.whdr, p[:k]...)
			p = p[k:]
			written += k
			if len(c.whdr) < 8 {
				return written, nil
			}
			hdr = c.whdr
		}
		size := int(binary.BigEndian.Uint32(hdr[:4]))
		if err := c.awaitDurable(int32(binary.BigEndian.Uint32(hdr[4:8]))); err != nil {
			return written, err
		}
		c.wleft = 4 + size
		if len(c.whdr) == 8 {
			c.whdr = c.whdr[:0]
			n, err := c.Conn.Write(hdr)
			c.wleft -= n
			if err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

func (c *syncConn) awaitDurable(corr int32) error {
	c.mu.Lock()
	pp, ok := c.pending[corr]
	delete(c.pending, corr)
	c.mu.Unlock()
	if !ok {
		return nil
	}
	if len(pp.written) > 0 {
		c.s.answered(pp.written)
	}
	if len(pp.synced) == 0 {
		return nil
	}
	return c.s.wait(pp.synced, pp.barrier)
}

// brokerListener is the listener kfake serves on. Until opened it serves
// only in-process connections (dialInternal), so the broker can be set
// right before any client reaches it; clients connecting meanwhile wait in
// the listen backlog. In-process connections stay possible once it is open
// (the retention passes use them). It wraps every connection for durable
// acknowledgements when there is a syncer.
type brokerListener struct {
	net.Listener
	s *syncer
	// tls, when set, is the server configuration every connection from
	// the network is served with; in-process ones stay plain.
	tls      *tls.Config
	internal chan net.Conn
	// accepted carries the network's connections once open.
	accepted chan acceptResult
	openOnce sync.Once
	closed   chan struct{}
	once     sync.Once
	// logger hears accept errors; acceptFailures counts them, lastLog
	// paces the log (acceptNetwork's goroutine only).
	logger         *slog.Logger
	acceptFailures atomic.Int64
	lastLog        time.Time
}

type acceptResult struct {
	conn net.Conn
	err  error
}

func newBrokerListener(ln net.Listener, s *syncer) *brokerListener {
	return &brokerListener{
		Listener: ln, s: s,
		internal: make(chan net.Conn), accepted: make(chan acceptResult), closed: make(chan struct{}),
	}
}

func (l *brokerListener) Accept() (net.Conn, error) {
	select {
	case conn := <-l.internal:
		return l.wrap(conn), nil
	case a := <-l.accepted:
		if a.err != nil {
			return nil, a.err
		}
		conn := a.conn
		if l.tls != nil {
			// The handshake runs on the first read, in kfake's goroutine
			// for this connection; the sync layer sees the decrypted
			// frames.
			conn = tls.Server(conn, l.tls)
		}
		return l.wrap(conn), nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// acceptNetwork hands the network's connections to Accept until the
// listener is closed. An error other than the listener's closing (EMFILE:
// the process is out of file descriptors) is logged and the accept tried
// again after a pause, as net/http does: handed to kfake, it would stop
// the broker's accept loop for good, without a word.
func (l *brokerListener) acceptNetwork() {
	var pause time.Duration
	for {
		conn, err := l.Listener.Accept()
		if err != nil && !errors.Is(err, net.ErrClosed) {
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			l.acceptFailures.Add(1)
			if l.logger != nil && time.Since(l.lastLog) >= 10*time.Second {
				l.lastLog = time.Now()
				l.logger.Error("kafka listener cannot accept a connection; it tries again", "err", err.Error(), "after", pause,
					"failures", l.acceptFailures.Load())
			}
			select {
			case <-time.After(pause):
				continue
			case <-l.closed:
				return
			}
		}
		pause = 0
		select {
		case l.accepted <- acceptResult{conn, err}:
		case <-l.closed:
			if conn != nil {
				conn.Close()
			}
			return
		}
		if err != nil && errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

func (l *brokerListener) wrap(conn net.Conn) net.Conn {
	if l.s == nil {
		return conn
	}
	return &syncConn{Conn: conn, s: l.s}
}

// openToClients starts serving the real listener.
func (l *brokerListener) openToClients() {
	l.openOnce.Do(func() {
		go l.acceptNetwork()
	})
}

func (l *brokerListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// dialInternal connects an in-process client, whatever the address.
func (l *brokerListener) dialInternal(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.internal <- server:
		return client, nil
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	case <-l.closed:
		client.Close()
		server.Close()
		return nil, net.ErrClosed
	}
}
