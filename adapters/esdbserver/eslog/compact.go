package eslog

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
	"sort"

	"github.com/cockroachdb/errors"
)

// A compacted segment is what scavenge writes (see Scavenge): the frames it
// keeps packed together after a position map, so that removed frames take
// no disk space. Its layout, all integers little-endian:
//
//	header (32 bytes): magic "\xff\xff\xff\xffESC1" | logical size uint64 |
//	                   run count uint64 | CRC-32C of the size, count and map
//	                   uint32 | zero uint32
//	map (16 bytes a run): offset of the run in the segment's logical bytes
//	                   uint64 | length uint64; runs in order, not touching
//	data:              the runs' bytes, one after the other
//
// The magic starts with a frame length no frame may have, so code that does
// not know the format refuses the file instead of misreading it. The
// segment's logical bytes, the ones every position refers to, are the runs
// at their offsets; each gap between runs (removed frames) reads as a skip
// frame spanning the gap followed by zeros, exactly as the sparse segments
// older scavenges wrote, so readers, open and the index see the same bytes
// in both formats and every position stays valid. The map is not held in
// memory: open checks it, reads take it from the segmentLog's mapCache.
const (
	compactHeaderSize = 32
	compactRunSize    = 16
)

var compactMagic = [8]byte{0xff, 0xff, 0xff, 0xff, 'E', 'S', 'C', '1'}

// compactRun is one run of kept bytes: off is its offset in the segment's
// logical bytes, phys its offset in the file.
type compactRun struct {
	off, len, phys uint64
}

// compactMap maps a compacted segment's logical bytes to its file.
type compactMap struct {
	size uint64
	runs []compactRun
}

// encodeCompactHeader returns the header and map of a compacted segment of
// logical size size holding runs (offsets relative to the segment), and
// sets each run's phys.
func encodeCompactHeader(size uint64, runs []compactRun) []byte {
	buf := make([]byte, compactHeaderSize, compactHeaderSize+compactRunSize*len(runs))
	copy(buf, compactMagic[:])
	binary.LittleEndian.PutUint64(buf[8:], size)
	binary.LittleEndian.PutUint64(buf[16:], uint64(len(runs)))
	phys := uint64(compactHeaderSize + compactRunSize*len(runs))
	for i := range runs {
		runs[i].phys = phys
		phys += runs[i].len
		buf = binary.LittleEndian.AppendUint64(buf, runs[i].off)
		buf = binary.LittleEndian.AppendUint64(buf, runs[i].len)
	}
	sum := crc32.Checksum(buf[8:24], castagnoli)
	sum = crc32.Update(sum, castagnoli, buf[compactHeaderSize:])
	binary.LittleEndian.PutUint32(buf[24:], sum)
	return buf
}

// readCompactMap returns f's position map if f is a compacted segment of
// fileSize bytes, or nil if it is a plain one.
func readCompactMap(f *os.File, fileSize int64) (*compactMap, error) {
	var hdr [compactHeaderSize]byte
	if fileSize < compactHeaderSize {
		return nil, nil
	}
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return nil, errors.Wrap(err, "read segment header")
	}
	if [8]byte(hdr[:8]) != compactMagic {
		return nil, nil
	}
	size := binary.LittleEndian.Uint64(hdr[8:])
	count := binary.LittleEndian.Uint64(hdr[16:])
	if count > uint64(fileSize)/compactRunSize {
		return nil, errors.Wrapf(ErrCorrupt, "compacted segment claims %d runs", count)
	}
	table := make([]byte, count*compactRunSize)
	if _, err := f.ReadAt(table, compactHeaderSize); err != nil {
		return nil, errors.Wrap(err, "read segment position map")
	}
	sum := crc32.Checksum(hdr[8:24], castagnoli)
	if crc32.Update(sum, castagnoli, table) != binary.LittleEndian.Uint32(hdr[24:]) {
		return nil, errors.Wrap(ErrCorrupt, "compacted segment: position map checksum mismatch")
	}
	m := &compactMap{size: size, runs: make([]compactRun, count)}
	phys := uint64(compactHeaderSize) + uint64(len(table))
	var end uint64
	for i := range m.runs {
		r := compactRun{off: binary.LittleEndian.Uint64(table[i*16:]), len: binary.LittleEndian.Uint64(table[i*16+8:]), phys: phys}
		if r.len == 0 || r.off < end || r.off+r.len > size || (r.off > end && r.off-end < skipFrameSize) {
			return nil, errors.Wrapf(ErrCorrupt, "compacted segment: run %d (%d+%d) is impossible", i, r.off, r.len)
		}
		m.runs[i] = r
		end, phys = r.off+r.len, phys+r.len
	}
	if (size > end && size-end < skipFrameSize) || phys != uint64(fileSize) {
		return nil, errors.Wrapf(ErrCorrupt, "compacted segment: map ends at %d of %d, data at %d of %d bytes", end, size, phys, fileSize)
	}
	return m, nil
}

// readAt fills p with the logical bytes at off of the compacted segment in f.
func (m *compactMap) readAt(f *os.File, p []byte, off uint64) (int, error) {
	done := 0
	for done < len(p) {
		at := off + uint64(done)
		if at >= m.size {
			return done, io.EOF
		}
		// i is the first run that ends after at.
		i := sort.Search(len(m.runs), func(i int) bool { return m.runs[i].off+m.runs[i].len > at })
		if i < len(m.runs) && m.runs[i].off <= at {
			r := m.runs[i]
			n := min(uint64(len(p)-done), r.off+r.len-at)
			if _, err := f.ReadAt(p[done:done+int(n)], int64(r.phys+at-r.off)); err != nil {
				return done, err
			}
			done += int(n)
			continue
		}
		// A gap: a skip frame at its start, then zeros.
		lo, hi := uint64(0), m.size
		if i > 0 {
			lo = m.runs[i-1].off + m.runs[i-1].len
		}
		if i < len(m.runs) {
			hi = m.runs[i].off
		}
		n := min(uint64(len(p)-done), hi-at)
		chunk := p[done : done+int(n)]
		clear(chunk)
		if at < lo+skipFrameSize {
			copy(chunk, encodeSkip(hi - lo)[at-lo:])
		}
		done += int(n)
	}
	return done, nil
}

// segmentReader reads a segment's logical bytes, whatever its format.
type segmentReader struct {
	f *os.File
	m *compactMap
}

func (r segmentReader) ReadAt(p []byte, off int64) (int, error) {
	if r.m == nil {
		return r.f.ReadAt(p, off)
	}
	return r.m.readAt(r.f, p, uint64(off))
}

// writeCompacted writes to f the compacted form of seg holding only the
// pieces in keep (absolute, in order, not touching), read from l.
func (l *segmentLog) writeCompacted(f *os.File, seg *segment, keep []piece) error {
	runs := make([]compactRun, 0, len(keep))
	for _, k := range keep {
		runs = append(runs, compactRun{off: k.lo - seg.base, len: k.hi - k.lo})
	}
	hdr := encodeCompactHeader(seg.size, runs)
	if _, err := l.io.writeAt(f, hdr, 0); err != nil {
		return errors.Wrapf(err, "write %s", f.Name())
	}
	for i, k := range keep {
		err := l.copyPiece(k, func(b []byte, at uint64) error {
			_, err := l.io.writeAt(f, b, int64(runs[i].phys+at-k.lo))
			return errors.Wrapf(err, "write %s", f.Name())
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// mapOf returns the position map of f, seg's compacted file, from the
// cache or read from f (and its checksum checked again) and cached if f is
// still seg's file.
func (l *segmentLog) mapOf(seg *segment, f *os.File) (*compactMap, error) {
	if m := l.maps.get(seg, f); m != nil {
		return m, nil
	}
	info, err := f.Stat()
	if err != nil {
		return nil, errors.Wrapf(err, "stat %s", f.Name())
	}
	m, err := readCompactMap(f, info.Size())
	if err != nil {
		return nil, errors.Wrapf(err, "segment %s", f.Name())
	}
	if m == nil {
		return nil, errors.Wrapf(ErrCorrupt, "segment %s: compacted segment without its header", f.Name())
	}
	l.mu.RLock()
	if seg.file == f {
		l.maps.put(seg, f, m)
	}
	l.mu.RUnlock()
	return m, nil
}

// reader returns a reader of seg's logical bytes.
func (l *segmentLog) reader(seg *segment) (segmentReader, error) {
	l.mu.RLock()
	f, compacted := seg.file, seg.compacted
	l.mu.RUnlock()
	if !compacted {
		return segmentReader{f: f}, nil
	}
	m, err := l.mapOf(seg, f)
	return segmentReader{f, m}, err
}

// removed reports whether pos, a frame start, is in a gap of a compacted
// segment: the frame there was removed by scavenge. It uses the segment's
// map if the cache holds it, and otherwise searches the map on disk rather
// than load it: index merges ask about positions in any order. If the map
// cannot be read, the answer is false, which keeps the index entry.
func (l *segmentLog) removed(pos uint64) bool {
	for {
		l.mu.RLock()
		i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > pos }) - 1
		if i < 0 || !l.segs[i].compacted {
			l.mu.RUnlock()
			return false
		}
		seg := l.segs[i]
		f := seg.file
		l.mu.RUnlock()
		off := pos - seg.base
		if m := l.maps.get(seg, f); m != nil {
			j := sort.Search(len(m.runs), func(j int) bool { return m.runs[j].off+m.runs[j].len > off })
			return j == len(m.runs) || m.runs[j].off > off
		}
		gone, err := removedOnDisk(f, off)
		if err == nil {
			return gone
		}
		l.mu.RLock()
		replaced := seg.file != f
		l.mu.RUnlock()
		if !replaced {
			return false
		}
	}
}

// removedOnDisk reports whether off is in a gap of the compacted segment
// in f, by a binary search of the position map in the file.
func removedOnDisk(f *os.File, off uint64) (bool, error) {
	var b [compactRunSize]byte
	if _, err := f.ReadAt(b[:8], 16); err != nil {
		return false, err
	}
	count := binary.LittleEndian.Uint64(b[:8])
	var err error
	run := func(j int) (uint64, uint64) {
		if _, rerr := f.ReadAt(b[:], compactHeaderSize+int64(j)*compactRunSize); rerr != nil {
			err = rerr
			return 0, 0
		}
		return binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])
	}
	j := sort.Search(int(count), func(j int) bool {
		o, n := run(j)
		return o+n > off
	})
	if err != nil {
		return false, err
	}
	if j == int(count) {
		return true, nil
	}
	o, _ := run(j)
	return o > off, err
}

// withoutRemoved yields the index entries of next but those of frames that
// scavenge removed from compacted segments, which no read can use.
func (l *segmentLog) withoutRemoved(next func() (ientry, bool, error)) func() (ientry, bool, error) {
	return func() (ientry, bool, error) {
		for {
			e, ok, err := next()
			if err != nil || !ok || !l.removed(e.pos) {
				return e, ok, err
			}
		}
	}
}
