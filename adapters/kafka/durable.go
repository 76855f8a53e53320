package kafka

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
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
//     (or is new) since it was last fsynced, all files at once. Any fd
//     flushes the inode, so the files are opened by path.
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

	// Touched only by the goroutine carrying out rounds, and by tests once
	// the broker is closed.
	files map[string]syncedFile
	dirs  map[string]bool

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
}

type topicPartition struct {
	topic string
	part  int32
}

type syncedFile struct {
	info os.FileInfo
	size int64
}

type syncRound struct {
	parts map[topicPartition]struct{}
	done  chan struct{}
	err   error
}

func newSyncer(dir string, match func(string) bool, logger *slog.Logger) *syncer {
	return &syncer{
		dir: dir, match: match, logger: logger,
		files: map[string]syncedFile{}, dirs: map[string]bool{}, names: map[[16]byte]string{},
	}
}

// wait returns once every byte written to the partitions' files before it
// was called is on stable storage.
func (s *syncer) wait(parts []topicPartition) error {
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

func (s *syncer) run() {
	for {
		s.mu.Lock()
		r := s.next
		if r == nil {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.next = nil
		failed := s.failed
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
	type job struct {
		path string
		info os.FileInfo
	}
	var (
		files []job
		dirs  []string
		top   bool // partitions/ and the data directory
	)
	for _, p := range list {
		pdir := partitionDir(s.dir, p.topic, p.part)
		entries, err := os.ReadDir(pdir)
		if errors.Is(err, os.ErrNotExist) {
			continue // nothing was written: the produce failed
		}
		if err != nil {
			return errors.Wrapf(err, "list %s", pdir)
		}
		present := map[string]bool{}
		newEntry := !s.dirs[pdir]
		for _, e := range entries {
			name := e.Name()
			if !strings.HasSuffix(name, ".dat") && !strings.HasSuffix(name, ".idx") {
				continue
			}
			path := filepath.Join(pdir, name)
			present[path] = true
			info, err := os.Stat(path)
			if errors.Is(err, os.ErrNotExist) {
				continue // removed by compaction or retention since the listing
			}
			if err != nil {
				return errors.Wrapf(err, "stat %s", path)
			}
			prev, known := s.files[path]
			same := known && os.SameFile(prev.info, info)
			if same && prev.size == info.Size() {
				continue
			}
			if !same {
				newEntry = true
			}
			files = append(files, job{path, info})
		}
		for path := range s.files {
			if filepath.Dir(path) == pdir && !present[path] {
				delete(s.files, path)
			}
		}
		if newEntry {
			dirs = append(dirs, pdir)
		}
		if !s.dirs[pdir] {
			top = true
		}
	}
	if top {
		dirs = append(dirs, filepath.Join(s.dir, "partitions"), s.dir)
	}

	errs := make([]error, len(files)+len(dirs))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() { errs[i] = fsyncPath(f.path) })
	}
	for i, d := range dirs {
		wg.Go(func() { errs[len(files)+i] = fsyncPath(d) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, f := range files {
		s.files[f.path] = syncedFile{info: f.info, size: f.info.Size()}
		if s.hooks.synced != nil {
			s.hooks.synced(f.path, f.info.Size())
		}
	}
	for _, p := range list {
		s.dirs[partitionDir(s.dir, p.topic, p.part)] = true
	}
	return nil
}

// fsyncPath fsyncs a file or directory by path. A file removed meanwhile
// (compaction rewrites segments, after fsyncing them itself) is skipped.
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

// syncedParts returns the synced-topic partitions a Produce request body
// (the frame after its size) writes to, if it wants an acknowledgement.
func (s *syncer) syncedParts(body []byte) (int32, []topicPartition) {
	r := kbin.Reader{Src: body}
	key := r.Int16()
	version := r.Int16()
	corr := r.Int32()
	r.NullableString() // client id
	if key != 0 || !r.Ok() {
		return corr, nil
	}
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if err := req.ReadFrom(r.Src); err != nil || req.Acks == 0 {
		return corr, nil // kfake fails the connection, or sends no answer
	}
	var parts []topicPartition
	for _, t := range req.Topics {
		topic := t.Topic
		if version >= 13 {
			var ok bool
			if topic, ok = s.topicName(t.TopicID); !ok {
				continue // kfake answers UNKNOWN_TOPIC_ID
			}
		}
		if !s.match(topic) {
			continue
		}
		for _, p := range t.Partitions {
			parts = append(parts, topicPartition{topic, p.Partition})
		}
	}
	return corr, parts
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
	pending map[int32][]topicPartition

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
			if corr, parts := c.s.syncedParts(c.rbody); len(parts) > 0 {
				c.mu.Lock()
				if c.pending == nil {
					c.pending = map[int32][]topicPartition{}
				}
				c.pending[corr] = parts
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
	parts, ok := c.pending[corr]
	delete(c.pending, corr)
	c.mu.Unlock()
	if !ok {
		return nil
	}
	return c.s.wait(parts)
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
// listener is closed.
func (l *brokerListener) acceptNetwork() {
	for {
		conn, err := l.Listener.Accept()
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
