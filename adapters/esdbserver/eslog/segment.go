package eslog

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/errors"
)

const segmentSuffix = ".log"

// segment is one file of the log; its first byte has the absolute offset base.
type segment struct {
	base uint64
	size uint64
	file *os.File
}

// segmentLog is the ordered set of segment files. Only the writer appends;
// readers may read any committed range concurrently.
type segmentLog struct {
	dir     string
	maxSize uint64

	mu   sync.RWMutex
	segs []*segment
}

func segmentName(base uint64) string { return fmt.Sprintf("%020d%s", base, segmentSuffix) }

// openSegmentLog opens or creates the log in dir, calls visit for every
// complete frame in order, and cuts a torn tail off the newest segment.
func openSegmentLog(dir string, maxSize uint64, visit func(pos uint64, body []byte) error) (*segmentLog, error) {
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

	l := &segmentLog{dir: dir, maxSize: maxSize}
	for i, base := range bases {
		if i > 0 {
			prev := l.segs[i-1]
			if prev.base+prev.size != base {
				l.close()
				return nil, errors.Wrapf(ErrCorrupt, "segment %s does not follow %s", segmentName(base), segmentName(prev.base))
			}
		}
		f, err := os.OpenFile(filepath.Join(dir, segmentName(base)), os.O_RDWR, 0o644)
		if err != nil {
			l.close()
			return nil, errors.Wrapf(err, "open segment %s", segmentName(base))
		}
		seg := &segment{base: base, file: f}
		l.segs = append(l.segs, seg)
		last := i == len(bases)-1
		good, err := scanSegment(seg, visit)
		if err != nil && !(last && errors.Is(err, errTorn)) {
			l.close()
			return nil, errors.Wrapf(err, "segment %s", segmentName(base))
		}
		if err != nil {
			// A torn tail is the normal result of a crash during a write that
			// was never acknowledged: cut it and carry on.
			if terr := f.Truncate(int64(good)); terr != nil {
				l.close()
				return nil, errors.Wrapf(terr, "cut torn tail of segment %s", segmentName(base))
			}
			if serr := f.Sync(); serr != nil {
				l.close()
				return nil, errors.Wrapf(serr, "sync segment %s", segmentName(base))
			}
		}
		seg.size = good
	}
	if len(l.segs) == 0 {
		if err := l.addSegment(0); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// scanSegment visits every complete frame of seg and returns the size of the
// valid prefix; a torn frame ends the scan with errTorn.
func scanSegment(seg *segment, visit func(pos uint64, body []byte) error) (uint64, error) {
	if _, err := seg.file.Seek(0, io.SeekStart); err != nil {
		return 0, errors.Wrap(err, "seek")
	}
	r := bufio.NewReaderSize(seg.file, 1<<20)
	var off uint64
	var header [frameHeaderSize]byte
	var body []byte
	for {
		if _, err := io.ReadFull(r, header[:]); err != nil {
			if err == io.EOF {
				return off, nil
			}
			return off, errors.Wrapf(errTorn, "frame header at %d", seg.base+off)
		}
		n := binary.LittleEndian.Uint32(header[:4])
		sum := binary.LittleEndian.Uint32(header[4:])
		if n == 0 || n > maxFrameSize {
			return off, errors.Wrapf(errTorn, "frame length %d at %d", n, seg.base+off)
		}
		if cap(body) < int(n) {
			body = make([]byte, n)
		}
		body = body[:n]
		if _, err := io.ReadFull(r, body); err != nil {
			return off, errors.Wrapf(errTorn, "frame body at %d", seg.base+off)
		}
		if crc32.Checksum(body, castagnoli) != sum {
			return off, errors.Wrapf(errTorn, "frame checksum at %d", seg.base+off)
		}
		if err := visit(seg.base+off, body); err != nil {
			return off, err
		}
		off += frameHeaderSize + uint64(n)
	}
}

func (l *segmentLog) addSegment(base uint64) error {
	path := filepath.Join(l.dir, segmentName(base))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return errors.Wrapf(err, "create segment %s", path)
	}
	if err := syncDir(l.dir); err != nil {
		_ = f.Close()
		return err
	}
	l.mu.Lock()
	l.segs = append(l.segs, &segment{base: base, file: f})
	l.mu.Unlock()
	return nil
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
func (l *segmentLog) rollIfFull() error {
	last := l.segs[len(l.segs)-1]
	if last.size < l.maxSize {
		return nil
	}
	if err := last.file.Sync(); err != nil {
		return errors.Wrap(err, "sync full segment")
	}
	return l.addSegment(last.base + last.size)
}

// write appends buf to the active segment and fsyncs it.
func (l *segmentLog) write(buf []byte) error {
	last := l.segs[len(l.segs)-1]
	if _, err := last.file.WriteAt(buf, int64(last.size)); err != nil {
		return errors.Wrap(err, "write segment")
	}
	if err := fdatasync(last.file); err != nil {
		return errors.Wrap(err, "sync segment")
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
		size := seg.size
		l.mu.RUnlock()
		at := pos + uint64(done) - seg.base
		if at >= size {
			return nil, errors.Wrapf(ErrCorrupt, "range %d+%d is outside the log", pos, n)
		}
		chunk := min(uint64(n-done), size-at)
		if _, err := seg.file.ReadAt(buf[done:done+int(chunk)], int64(at)); err != nil {
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
