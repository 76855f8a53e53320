package eslog

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/errors"
)

const segmentSuffix = ".log"

// segment is one file of the log; its first byte has the absolute offset base.
type segment struct {
	base uint64
	size uint64
	file *os.File
	// compacted is set for a compacted segment (see compact.go), whose
	// position map is read from file when needed (see mapOf); it changes
	// with file, under segmentLog.mu.
	compacted bool
	// skipped is set when a scan met a skip frame in it.
	skipped bool
}

// segmentLog is the ordered set of segment files. Only the writer appends;
// readers may read any committed range concurrently.
type segmentLog struct {
	dir     string
	maxSize uint64
	io      fileIO

	mu   sync.RWMutex
	segs []*segment
	// maps caches the position maps of compacted segments.
	maps *mapCache

	// gen counts the segment files replaced by scavenge; a reader that
	// finds a bad frame while it changed reads again (see scavenge.go).
	gen atomic.Uint64
	// skipped is set once the log is known to hold skip frames, where
	// scavenge removed events: a stream's revisions may then have gaps.
	skipped atomic.Bool

	// sparse makes scavenge write the sparse segments of older versions,
	// and crashAt, if set, is called at named steps of a segment's
	// replacement and stops it where it returns an error: both for tests.
	sparse  bool
	crashAt func(step, tmp string) error
}

func segmentName(base uint64) string { return fmt.Sprintf("%020d%s", base, segmentSuffix) }

// openSegmentLog opens or creates the log in dir. Each segment's size is
// its file's until replay has checked it. A compacted segment's header and
// position map are checked, but the map is not kept: reads load it into a
// cache of mapBudget bytes.
func openSegmentLog(dir string, maxSize uint64, fio fileIO, mapBudget int64) (*segmentLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, errors.Wrapf(err, "create data directory %s", dir)
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, errors.Wrapf(err, "list data directory %s", dir)
	}
	var bases []uint64
	for _, n := range names {
		name := n.Name()
		if n.IsDir() || !strings.HasSuffix(name, segmentSuffix) {
			continue
		}
		base, err := strconv.ParseUint(strings.TrimSuffix(name, segmentSuffix), 10, 64)
		if err != nil {
			continue
		}
		bases = append(bases, base)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })

	l := &segmentLog{dir: dir, maxSize: maxSize, io: fio, maps: newMapCache(mapBudget)}
	if err := l.removeScavengeLeftovers(); err != nil {
		return nil, err
	}
	for _, base := range bases {
		path := filepath.Join(dir, segmentName(base))
		f, err := os.OpenFile(path, os.O_RDWR, 0o644)
		if err != nil {
			_ = l.close()
			return nil, errors.Wrapf(err, "open segment %s", path)
		}
		info, err := f.Stat()
		if err != nil {
			_ = f.Close()
			_ = l.close()
			return nil, errors.Wrapf(err, "stat segment %s", path)
		}
		seg := &segment{base: base, file: f, size: uint64(info.Size())}
		m, err := readCompactMap(f, info.Size())
		if err != nil {
			_ = f.Close()
			_ = l.close()
			return nil, errors.Wrapf(err, "segment %s", path)
		}
		if m != nil {
			seg.compacted, seg.size = true, m.size
		}
		l.segs = append(l.segs, seg)
	}
	if len(l.segs) == 0 {
		if err := l.addSegment(0); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// end is the offset just past the log's last byte.
func (l *segmentLog) end() uint64 { return l.head() }

// replay calls visit for every complete frame that starts at or after from
// (a frame boundary: where an index checkpoint ends), in order, and cuts a
// torn tail off the newest segment. Segments that end before from are not
// read.
//
// A bad frame (short, with an impossible length or a wrong checksum) is a
// torn tail only if it is in the newest segment and no valid frame starts
// anywhere after it: that is what a write cut by a crash leaves, a partial
// frame or zeros up to the end of the file. A bad frame with a valid frame
// after it, or in an older segment, is damage to data that was acknowledged,
// and open refuses with ErrCorrupt naming the file and byte offset rather
// than cut it. A cut tail is logged and, unless it is all zeros, kept next to
// the segment in a file named <segment>.torn-<offset>.
func (l *segmentLog) replay(from uint64, logger *slog.Logger, visit func(pos uint64, body []byte, sum uint32) error) error {
	for i, seg := range l.segs {
		path := filepath.Join(l.dir, segmentName(seg.base))
		if i > 0 {
			prev := l.segs[i-1]
			if prev.base+prev.size != seg.base {
				return errors.Wrapf(ErrCorrupt, "segment %s does not follow %s, which ends at %d", path, segmentName(prev.base), prev.base+prev.size)
			}
		}
		fileSize := int64(seg.size)
		if seg.base+seg.size <= from {
			continue
		}
		var start uint64
		if from > seg.base {
			start = from - seg.base
		}
		rd, err := l.reader(seg)
		if err != nil {
			return errors.Wrapf(err, "segment %s", path)
		}
		good, bad, err := scanSegment(seg, rd, start, fileSize, visit)
		if seg.skipped {
			l.skipped.Store(true)
		}
		if err != nil {
			return errors.Wrapf(err, "segment %s", path)
		}
		l.mu.Lock()
		seg.size = good
		l.mu.Unlock()
		if bad == "" {
			continue
		}
		if i < len(l.segs)-1 || seg.compacted {
			return errors.Wrapf(ErrCorrupt, "%s: bad frame at byte %d (%s) in a segment that is not the newest; refusing to open", path, good, bad)
		}
		next, found, err := findFrame(seg.file, int64(good)+1, fileSize)
		if err != nil {
			return errors.Wrapf(err, "segment %s: look for valid frames after byte %d", path, good)
		}
		if found {
			return errors.Wrapf(ErrCorrupt,
				"%s: bad frame at byte %d (%s) but a valid frame follows at byte %d, so this is damage, not a torn write; refusing to open rather than cut %d bytes",
				path, good, bad, next, fileSize-int64(good))
		}
		// A torn tail is the normal result of a crash during a write that
		// was never acknowledged: keep its bytes aside, cut it and carry on.
		if err := cutTail(seg.file, path, good, fileSize, bad, logger); err != nil {
			return err
		}
	}
	return nil
}

// verify checks the checksum of every frame from from to to, two frame
// boundaries, without applying any: a bad frame there is damage to data
// that was acknowledged and indexed, and verify returns ErrCorrupt naming
// the file and byte offset.
func (l *segmentLog) verify(from, to uint64) error {
	for _, seg := range l.segs {
		end := seg.base + seg.size
		if end <= from || seg.base >= to {
			continue
		}
		start := max(from, seg.base) - seg.base
		stop := min(to, end) - seg.base
		size := seg.size
		path := filepath.Join(l.dir, segmentName(seg.base))
		rd, err := l.reader(seg)
		if err != nil {
			return errors.Wrapf(err, "segment %s", path)
		}
		good, bad, err := scanSegment(seg, rd, start, int64(stop), func(uint64, []byte, uint32) error { return nil })
		seg.size = size
		if err != nil {
			return errors.Wrapf(err, "segment %s", path)
		}
		if bad != "" || good != stop {
			return errors.Wrapf(ErrCorrupt, "%s: bad frame at byte %d (%s) in the indexed log; refusing to open", path, good, cmp.Or(bad, "frames do not end where the index says"))
		}
	}
	return nil
}

// scanSegment visits every complete frame of seg, read from rd, from byte
// start on and
// returns the size of its valid prefix and, if a bad frame ends that prefix,
// why it is bad. A visit error or an I/O error is returned as err. While it
// runs, seg.size covers the frames visited, so that visit may read them.
func scanSegment(seg *segment, rd segmentReader, start uint64, fileSize int64, visit func(pos uint64, body []byte, sum uint32) error) (good uint64, bad string, err error) {
	r := bufio.NewReaderSize(io.NewSectionReader(rd, int64(start), fileSize-int64(start)), 1<<20)
	off := start
	var header [frameHeaderSize]byte
	var body []byte
	for {
		if _, err := io.ReadFull(r, header[:]); err != nil {
			if err == io.EOF {
				return off, "", nil
			}
			if err == io.ErrUnexpectedEOF {
				return off, "frame header cut short", nil
			}
			return off, "", errors.Wrapf(err, "read frame header at byte %d", off)
		}
		n := binary.LittleEndian.Uint32(header[:4])
		sum := binary.LittleEndian.Uint32(header[4:])
		if n == 0 || n > maxFrameSize {
			return off, fmt.Sprintf("frame length %d is impossible", n), nil
		}
		if off+frameHeaderSize+uint64(n) > uint64(fileSize) {
			return off, fmt.Sprintf("frame length %d runs past the end of the file", n), nil
		}
		if cap(body) < int(n) {
			body = make([]byte, n)
		}
		body = body[:n]
		if _, err := io.ReadFull(r, body); err != nil {
			return off, "", errors.Wrapf(err, "read frame body at byte %d", off)
		}
		if crc32.Checksum(body, castagnoli) != sum {
			return off, "frame checksum mismatch", nil
		}
		if span, ok := skipSpan(body); ok {
			// Scavenge removed the frames up to off+span: jump over them.
			if span < frameHeaderSize+uint64(n) || off+span > uint64(fileSize) {
				return off, fmt.Sprintf("skip frame span %d is impossible", span), nil
			}
			if _, err := r.Discard(int(span - frameHeaderSize - uint64(n))); err != nil {
				return off, "", errors.Wrapf(err, "skip removed frames at byte %d", off)
			}
			seg.size = off + span
			seg.skipped = true
			off += span
			continue
		}
		seg.size = off + frameHeaderSize + uint64(n)
		if err := visit(seg.base+off, body, sum); err != nil {
			return off, "", errors.Wrapf(err, "frame at byte %d", off)
		}
		off += frameHeaderSize + uint64(n)
	}
}

// findFrame reports the first offset at or after from where a valid frame
// starts: a plausible length that fits in the file, a known kind, a
// matching checksum and a body that decodes. Checking every offset makes the
// answer independent of whatever length the bad frame claims.
func findFrame(f *os.File, from, size int64) (int64, bool, error) {
	const window = 1 << 20
	buf := make([]byte, window+frameHeaderSize+1)
	var scratch []byte
	for start := from; start+frameHeaderSize < size; start += window {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-start)], start)
		if err != nil && err != io.EOF {
			return 0, false, errors.Wrapf(err, "read at byte %d", start)
		}
		chunk := buf[:n]
		for i := 0; i < window && i+frameHeaderSize < len(chunk); i++ {
			at := start + int64(i)
			length := int64(binary.LittleEndian.Uint32(chunk[i:]))
			if length == 0 || length > maxFrameSize || at+frameHeaderSize+length > size {
				continue
			}
			if k := chunk[i+frameHeaderSize]; k != kindAppend && k != kindTombstone {
				continue
			}
			body := chunk[i+frameHeaderSize:]
			if end := frameHeaderSize + int(length); i+end > len(chunk) {
				if cap(scratch) < int(length) {
					scratch = make([]byte, length)
				}
				body = scratch[:length]
				if _, err := f.ReadAt(body, at+frameHeaderSize); err != nil {
					return 0, false, errors.Wrapf(err, "read at byte %d", at+frameHeaderSize)
				}
			}
			body = body[:length]
			if crc32.Checksum(body, castagnoli) == binary.LittleEndian.Uint32(chunk[i+4:]) && decodesAsFrame(body) {
				return at, true, nil
			}
		}
	}
	return 0, false, nil
}

// decodesAsFrame reports whether body is a well-formed frame body.
func decodesAsFrame(body []byte) bool {
	d := decoder{b: body}
	switch d.byte() {
	case kindAppend:
		_, err := decodeAppend(&d)
		return err == nil
	case kindTombstone:
		d.bytes()
		return d.err == nil && d.off == len(body)
	default:
		return false
	}
}

// cutTail keeps the bytes of f from good to size in a file next to it, unless
// they are all zeros (preallocated or never written), then truncates f to
// good and syncs it.
func cutTail(f *os.File, path string, good uint64, size int64, why string, logger *slog.Logger) error {
	tail := io.NewSectionReader(f, int64(good), size-int64(good))
	zero, err := allZero(tail)
	if err != nil {
		return errors.Wrapf(err, "read torn tail of %s", path)
	}
	kept := ""
	if !zero {
		kept, err = keepAside(tail, fmt.Sprintf("%s.torn-%d", path, good))
		if err != nil {
			return err
		}
	}
	if err := f.Truncate(int64(good)); err != nil {
		return errors.Wrapf(err, "cut torn tail of %s at byte %d", path, good)
	}
	if err := f.Sync(); err != nil {
		return errors.Wrapf(err, "sync %s", path)
	}
	logger.Warn("event store: cut a torn tail left by an interrupted write; it was never acknowledged",
		"segment", path, "offset", good, "bytes", size-int64(good), "reason", why, "all_zero", zero, "kept_in", kept)
	return nil
}

func allZero(r io.Reader) (bool, error) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		for _, b := range buf[:n] {
			if b != 0 {
				return false, nil
			}
		}
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// keepAside copies tail into a new file named name (or name.1, name.2, ...
// if it exists), syncs it and its directory, and returns its path.
func keepAside(tail *io.SectionReader, name string) (string, error) {
	path := name
	var out *os.File
	for i := 1; ; i++ {
		var err error
		out, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			break
		}
		if !os.IsExist(err) || i > 1000 {
			return "", errors.Wrapf(err, "create %s to keep a torn tail", path)
		}
		path = fmt.Sprintf("%s.%d", name, i)
	}
	if _, err := tail.Seek(0, io.SeekStart); err != nil {
		_ = out.Close()
		return "", errors.Wrap(err, "seek torn tail")
	}
	if _, err := io.Copy(out, tail); err != nil {
		_ = out.Close()
		return "", errors.Wrapf(err, "copy torn tail to %s", path)
	}
	if err := out.Sync(); err != nil {
		_ = out.Close()
		return "", errors.Wrapf(err, "sync %s", path)
	}
	if err := out.Close(); err != nil {
		return "", errors.Wrapf(err, "close %s", path)
	}
	return path, syncDir(filepath.Dir(path))
}

func (l *segmentLog) addSegment(base uint64) error {
	path := filepath.Join(l.dir, segmentName(base))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if isNoSpace(err) {
			return errors.Wrapf(ErrNoSpace, "create segment %s: %v", path, err)
		}
		return failed(errors.Wrapf(err, "create segment %s", path))
	}
	if err := syncDir(l.dir); err != nil {
		_ = f.Close()
		return failed(err)
	}
	l.mu.Lock()
	l.segs = append(l.segs, &segment{base: base, file: f})
	l.mu.Unlock()
	return nil
}

// failed marks err as a disk failure after which the files' state is unknown.
func failed(err error) error {
	return errors.Wrapf(ErrWriteFailed, "%v; the state of the log on disk is unknown, so the store refuses writes: restart to recover", err)
}

// isNoSpace reports whether err says the disk or the user's quota is full.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// fileIO is how the log writes and syncs segment files; tests replace it to
// inject disk errors.
type fileIO struct {
	writeAt func(f *os.File, b []byte, off int64) (int, error)
	sync    func(f *os.File) error
}

func (o *fileIO) setDefaults() {
	if o.writeAt == nil {
		o.writeAt = func(f *os.File, b []byte, off int64) (int, error) { return f.WriteAt(b, off) }
	}
	if o.sync == nil {
		o.sync = fdatasync
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return errors.Wrapf(err, "open directory %s", dir)
	}
	defer d.Close()
	return errors.Wrapf(d.Sync(), "sync directory %s", dir)
}

// head is the absolute offset the next frame will be written at. Only the
// writer calls it.
func (l *segmentLog) head() uint64 {
	last := l.segs[len(l.segs)-1]
	return last.base + last.size
}

// rollIfFull starts a new segment when the active one has reached its size
// limit. It never changes head, so positions computed before it stay valid.
// Its errors wrap ErrNoSpace (nothing changed, try again later) or
// ErrWriteFailed (restart).
func (l *segmentLog) rollIfFull() error {
	last := l.segs[len(l.segs)-1]
	if last.size < l.maxSize {
		return nil
	}
	if err := l.io.sync(last.file); err != nil {
		return failed(errors.Wrapf(err, "sync full segment %s", last.file.Name()))
	}
	return l.addSegment(last.base + last.size)
}

// roll starts a new segment now, unless the active one is empty; like
// rollIfFull it never changes head. Only the writer calls it.
func (l *segmentLog) roll() error {
	last := l.segs[len(l.segs)-1]
	if last.size == 0 {
		return nil
	}
	if err := l.io.sync(last.file); err != nil {
		return failed(errors.Wrapf(err, "sync segment %s", last.file.Name()))
	}
	return l.addSegment(last.base + last.size)
}

// write appends buf to the active segment and fsyncs it. A write that fails
// for lack of space is cut off again, so the file ends at the last committed
// frame, and the error wraps ErrNoSpace: the next write may succeed. Any
// other failure, and every failed fsync, wraps ErrWriteFailed: after a failed
// fsync the kernel may have dropped the dirty pages and marked them clean,
// so nothing the store could do now would tell what is on disk.
func (l *segmentLog) write(buf []byte) error {
	last := l.segs[len(l.segs)-1]
	if _, err := l.io.writeAt(last.file, buf, int64(last.size)); err != nil {
		err = errors.Wrapf(err, "write %d bytes to segment %s at byte %d", len(buf), last.file.Name(), last.size)
		if terr := last.file.Truncate(int64(last.size)); terr != nil {
			return failed(errors.CombineErrors(err, errors.Wrap(terr, "cut the partial write")))
		}
		if isNoSpace(err) {
			return errors.Wrapf(ErrNoSpace, "%v; the partial write was cut and later writes succeed once there is space", err)
		}
		return failed(err)
	}
	if err := l.io.sync(last.file); err != nil {
		return failed(errors.Wrapf(err, "sync segment %s", last.file.Name()))
	}
	l.mu.Lock()
	last.size += uint64(len(buf))
	l.mu.Unlock()
	return nil
}

// readAt reads n committed bytes at absolute offset pos; the range may span
// segments.
func (l *segmentLog) readAt(pos uint64, n int) ([]byte, error) {
	buf := make([]byte, n)
	l.mu.RLock()
	segs := l.segs
	l.mu.RUnlock()
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > pos }) - 1
	for done := 0; done < n; i++ {
		if i < 0 || i >= len(segs) {
			return nil, errors.Wrapf(ErrCorrupt, "range %d+%d is outside the log", pos, n)
		}
		seg := segs[i]
		l.mu.RLock()
		size, f, compacted := seg.size, seg.file, seg.compacted
		l.mu.RUnlock()
		at := pos + uint64(done) - seg.base
		if at >= size {
			return nil, errors.Wrapf(ErrCorrupt, "range %d+%d is outside the log", pos, n)
		}
		chunk := min(uint64(n-done), size-at)
		var m *compactMap
		var err error
		if compacted {
			m, err = l.mapOf(seg, f)
		}
		if err == nil {
			_, err = (segmentReader{f, m}).ReadAt(buf[done:done+int(chunk)], int64(at))
		}
		if err != nil {
			l.mu.RLock()
			replaced := seg.file != f
			l.mu.RUnlock()
			if replaced && errors.Is(err, os.ErrClosed) {
				// Scavenge replaced the file: read the new one, which
				// holds the same bytes wherever a reader may look.
				i--
				continue
			}
			return nil, errors.Wrapf(err, "read log at %d", pos+uint64(done))
		}
		done += int(chunk)
	}
	return buf, nil
}

func (l *segmentLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	for _, s := range l.segs {
		err = errors.CombineErrors(err, s.file.Close())
	}
	l.segs = nil
	return err
}
