package eslog

import (
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/cockroachdb/errors"
)

// Scavenge reclaims the disk space of events that no read returns any more,
// as KurrentDB's scavenge does, without changing any position:
//
//   - It looks only at closed segments (never the one being written) that
//     the index checkpoint covers, so that open never replays from inside
//     one; it first closes the segment being written, if that holds at
//     least a sixteenth of Options.SegmentSize, and writes the index's
//     memtable out. The frame the checkpoint ends with is kept.
//   - An append frame is removed when every event in it is dead: its stream
//     is tombstoned, or the event is below $tb or $maxCount (including a
//     soft delete), or older than $maxAge with every older event of its
//     stream removed too. A frame whose events are all dead but that holds
//     its stream's last event becomes a stub (kindStub) unless the stream
//     is tombstoned, so that its revisions continue; a $$ stream's last
//     event is kept whole. Tombstone frames are kept.
//   - The segment is rewritten compacted (see compact.go): the kept frames
//     packed after a position map, each removed run reading as a skip frame
//     followed by zeros, so no position changes. The samples (the frame
//     starts a $all read may start from) inside a run are moved to its
//     start, in the position file, before the segment is replaced.
//     Segments that older versions rewrote sparse (skip frames and holes)
//     read the same way and are compacted by the next scavenge.
//   - The segment is rewritten beside the original (<segment>.scavenge),
//     synced, renamed over it and the directory synced: a crash at any point
//     leaves either the old segment or the new one, and open deletes a left
//     over .scavenge file. The first rewrite also creates the SCAVENGED
//     marker, which tells open that index entries may point at removed
//     frames (they read as not found); index merges drop those entries.
//   - Readers go on meanwhile: a read that meets the replaced file reads it
//     again (see segmentLog.frameAt and frameScanner.resync).
const (
	kindSkip byte = 3
	// skipBodySize is a skip frame's body: the kind and the span, in bytes
	// from the skip frame's start to the next frame's, as a uint64.
	skipBodySize  = 1 + 8
	skipFrameSize = frameHeaderSize + skipBodySize

	scavengeSuffix = ".scavenge"
	scavengedName  = "SCAVENGED"
)

// ErrScavengeRunning is returned by Scavenge while another scavenge of the
// same store is under way.
var ErrScavengeRunning = errors.New("a scavenge is already running")

// errGone is returned by frameAt for a frame that scavenge removed.
var errGone = errors.New("frame removed by scavenge")

// ScavengeResult tells what a scavenge did.
type ScavengeResult struct {
	// SegmentsScanned counts the closed segments looked at, and
	// SegmentsRewritten those that had frames to remove or were sparse.
	SegmentsScanned, SegmentsRewritten int
	// EventsRemoved counts the events removed (those left as a stub too),
	// and BytesRemoved the bytes of their frames less the stubs'.
	EventsRemoved, BytesRemoved int64
}

// skipSpan returns the span of a skip frame's body.
func skipSpan(body []byte) (uint64, bool) {
	if len(body) != skipBodySize || body[0] != kindSkip {
		return 0, false
	}
	return binary.LittleEndian.Uint64(body[1:]), true
}

func encodeSkip(span uint64) []byte {
	buf := make([]byte, frameHeaderSize, skipFrameSize)
	buf = append(buf, kindSkip)
	buf = binary.LittleEndian.AppendUint64(buf, span)
	return sealFrame(buf, 0)
}

// scanner returns a frame scanner of the committed log from sample to head
// that survives a segment file being replaced by scavenge; gen is the log's
// generation loaded before sample was.
func (s *Store) scanner(sample, head, gen uint64) frameScanner {
	return frameScanner{log: s.log, pos: sample, limit: head, gen: gen, floor: func(pos uint64) (uint64, error) {
		s.mu.RLock()
		defer s.mu.RUnlock()
		return s.floorSample(pos)
	}}
}

// resync is called when the scanner met a bad frame. If scavenge replaced a
// segment file since the scanner's generation, the scanner may stand inside
// a run of removed frames: it finds the first frame at or after its
// position by walking from the sample before it, which is a frame start in
// the new file, and reports true. The frames it passes were removed, so the
// read misses nothing that is still there.
func (sc *frameScanner) resync() bool {
	if sc.floor == nil {
		return false
	}
	for {
		gen := sc.log.gen.Load()
		if gen == sc.gen {
			return false
		}
		sc.gen, sc.buf, sc.at = gen, nil, 0
		p, err := sc.floor(sc.pos)
		if err != nil {
			return false
		}
		for p < sc.pos && err == nil {
			var body []byte
			if body, err = sc.log.frameAt(p); err == nil {
				if span, ok := skipSpan(body); ok {
					p += span
				} else {
					p += frameHeaderSize + uint64(len(body))
				}
			}
		}
		if err == nil {
			sc.pos = p
			return true
		}
		// Another segment was replaced meanwhile: try again if so.
	}
}

// Scavenge removes, from the closed segments, the frames whose events no
// read returns any more (see the comment on kindSkip). Appends and reads go
// on meanwhile. It stops with ctx's error when ctx is done, keeping what it
// finished, and with ErrClosed when the store closes.
func (s *Store) Scavenge(ctx context.Context) (ScavengeResult, error) {
	var res ScavengeResult
	if !s.scavMu.TryLock() {
		if err := s.stopped(ctx); err != nil {
			return res, err // Close holds the lock
		}
		return res, ErrScavengeRunning
	}
	defer s.scavMu.Unlock()
	if err := s.stopped(ctx); err != nil {
		return res, err
	}
	if err := s.closeActiveSegment(ctx); err != nil {
		return res, err
	}
	if err := s.indexClosedSegments(ctx); err != nil {
		return res, err
	}
	s.log.mu.RLock()
	segs := slices.Clone(s.log.segs)
	s.log.mu.RUnlock()
	// The checkpoint's last frame is kept: open checks that the log
	// still holds it. A later checkpoint's is past every closed segment.
	v := scavenger{s: s, now: s.opts.Now(), broken: map[string]bool{}, protect: s.ckptLastFrame.Load()}
	covered := s.ckptThrough.Load()
	for _, seg := range segs[:len(segs)-1] {
		if seg.base+seg.size > covered {
			break
		}
		if err := s.stopped(ctx); err != nil {
			return res, err
		}
		res.SegmentsScanned++
		if err := v.segment(ctx, seg, &res); err != nil {
			return res, err
		}
	}
	level := slog.LevelDebug
	if res.EventsRemoved > 0 {
		level = slog.LevelInfo
	}
	s.opts.Logger.Log(ctx, level, "event store: scavenge finished", "segments_scanned", res.SegmentsScanned,
		"segments_rewritten", res.SegmentsRewritten, "events_removed", res.EventsRemoved, "bytes_removed", res.BytesRemoved)
	return res, nil
}

// stopped returns why a scavenge must stop now, or nil.
func (s *Store) stopped(ctx context.Context) error {
	select {
	case <-s.closing:
		return ErrClosed
	default:
	}
	return errors.Wrap(ctx.Err(), "scavenge")
}

// closeActiveSegment starts a new segment if the one being written holds
// at least a sixteenth of Options.SegmentSize, so that a scavenge reaches
// what was written before it without making many small segments.
func (s *Store) closeActiveSegment(ctx context.Context) error {
	s.log.mu.RLock()
	size := s.log.segs[len(s.log.segs)-1].size
	s.log.mu.RUnlock()
	if size < s.opts.SegmentSize/16 {
		return nil
	}
	r := &request{op: opRoll, result: make(chan response, 1)}
	select {
	case s.requests <- r:
	case <-s.closing:
		return ErrClosed
	case <-ctx.Done():
		return errors.Wrap(ctx.Err(), "scavenge")
	}
	select {
	case resp := <-r.result:
		return errors.Wrap(resp.err, "close the segment being written")
	case <-s.done:
		// The writer answers every request it took before it stops.
		select {
		case resp := <-r.result:
			return errors.Wrap(resp.err, "close the segment being written")
		default:
			return ErrClosed
		}
	}
}

// indexClosedSegments writes the memtables out as tables until the index
// checkpoint covers every closed segment, or nothing is left to write.
func (s *Store) indexClosedSegments(ctx context.Context) error {
	s.log.mu.RLock()
	target := s.log.segs[len(s.log.segs)-1].base
	s.log.mu.RUnlock()
	for s.ckptThrough.Load() < target {
		s.mu.Lock()
		if s.frozen == nil && s.mem.entries > 0 {
			s.frozen = s.mem
			s.mem = newMemtable(s.frozen.to, s.frozen)
		}
		pending := s.frozen != nil
		s.mu.Unlock()
		if !pending {
			return nil
		}
		select {
		case s.flushReq <- struct{}{}:
		default:
		}
		for pending {
			if err := s.stopped(ctx); err != nil {
				return err
			}
			time.Sleep(5 * time.Millisecond)
			s.mu.RLock()
			pending = s.frozen != nil
			s.mu.RUnlock()
		}
	}
	return nil
}

// streamFate is what decides which events of a stream a scavenge removes.
type streamFate struct {
	tombstoned bool
	last       int64
	first      uint64
	minCreated int64
}

type scavenger struct {
	s   *Store
	now time.Time
	// fates caches streams' fates for one segment; broken marks the $maxAge
	// streams of which a frame was kept, after which no later frame of
	// theirs is removed for its age (removed events are always a prefix).
	fates  map[string]*streamFate
	broken map[string]bool
	// protect is the start of a frame that must stay.
	protect uint64
}

func (v *scavenger) fate(stream string) (*streamFate, error) {
	if f := v.fates[stream]; f != nil {
		return f, nil
	}
	v.s.mu.RLock()
	st, err := v.s.state(stream)
	var f streamFate
	if err == nil {
		f = streamFate{tombstoned: st.tombstoned, last: st.last, first: st.firstReadable()}
		if st.meta.maxAge > 0 {
			f.minCreated = v.now.Add(-st.meta.maxAge).UnixNano()
		}
	}
	v.s.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	v.fates[stream] = &f
	return &f, nil
}

// verdict is what a scavenge does with one frame.
type verdict int

const (
	keepFrame verdict = iota
	removeFrame
	// stubFrame replaces the frame by a stub of its last event (kindStub).
	stubFrame
)

// judge tells what to do with the frame at pos and returns it decoded if
// it is an append frame. An append frame is removed when every event in it
// is dead, and replaced by a stub when every event is dead but for being
// its stream's last (a $$ stream's last event, its metadata, is kept
// whole); a stub frame is removed when its stream is tombstoned or has
// newer events. Tombstone frames are kept.
func (v *scavenger) judge(pos uint64, body []byte) (verdict, appendFrame, error) {
	d := decoder{b: body}
	var f appendFrame
	if pos == v.protect {
		return keepFrame, f, nil
	}
	switch d.byte() {
	case kindAppend:
		var err error
		if f, err = decodeAppend(&d); err != nil {
			return keepFrame, f, errors.Wrapf(ErrCorrupt, "append frame at %d: %v", pos, err)
		}
	case kindStub:
		stream, rev, _, err := decodeStub(&d)
		if err != nil {
			return keepFrame, f, errors.Wrapf(ErrCorrupt, "stub frame at %d: %v", pos, err)
		}
		fate, err := v.fate(stream)
		if err != nil {
			return keepFrame, f, err
		}
		if fate.tombstoned || int64(rev) != fate.last {
			return removeFrame, f, nil
		}
		return keepFrame, f, nil
	default:
		return keepFrame, f, nil
	}
	fate, err := v.fate(f.stream)
	if err != nil {
		return keepFrame, f, err
	}
	if fate.tombstoned {
		return removeFrame, f, nil
	}
	last := false
	for i := range f.events {
		rev := f.firstRevision + uint64(i)
		old := fate.minCreated > 0 && f.created < fate.minCreated && !v.broken[f.stream]
		if rev >= fate.first && !old {
			if fate.minCreated > 0 {
				v.broken[f.stream] = true
			}
			return keepFrame, f, nil
		}
		last = last || int64(rev) == fate.last
	}
	if !last {
		return removeFrame, f, nil
	}
	if fate.minCreated > 0 {
		v.broken[f.stream] = true
	}
	if v.s.log.sparse || isMetadataStream(f.stream) {
		return keepFrame, f, nil
	}
	return stubFrame, f, nil
}

// segment rewrites seg without its dead frames, if it has any.
func (v *scavenger) segment(ctx context.Context, seg *segment, res *ScavengeResult) error {
	s := v.s
	v.fates = map[string]*streamFate{}
	end := seg.base + seg.size
	sc := frameScanner{log: s.log, pos: seg.base, limit: end}
	var keep []piece
	var removed, events int64
	add := func(p piece) {
		if k := len(keep); k > 0 && keep[k-1].hi == p.lo && keep[k-1].data == nil && p.data == nil {
			keep[k-1].hi = p.hi
		} else {
			keep = append(keep, p)
		}
	}
	for n := 0; ; n++ {
		if n%checkEvery == 0 {
			if err := s.stopped(ctx); err != nil {
				return err
			}
		}
		pos, body, ok, err := sc.next()
		if err != nil {
			return errors.Wrapf(err, "scavenge segment %s", segmentName(seg.base))
		}
		if !ok {
			break
		}
		verdict, f, err := v.judge(pos, body)
		if err != nil {
			return err
		}
		switch verdict {
		case removeFrame:
			removed += int64(sc.pos - pos)
			events += int64(len(f.events))
			continue
		case stubFrame:
			// The stub takes the frame's start; a skip frame the rest.
			last := f.firstRevision + uint64(len(f.events)) - 1
			stub := encodeStub(f.stream, last, f.created)
			if uint64(len(stub))+skipFrameSize <= sc.pos-pos {
				add(piece{lo: pos, hi: pos + uint64(len(stub)), data: stub})
				removed += int64(sc.pos-pos) - int64(len(stub))
				events += int64(len(f.events))
				continue
			}
		}
		add(piece{lo: pos, hi: sc.pos})
	}
	// A gap too short for a skip frame stays (it cannot happen with whole
	// frames, but the format needs it).
	keep = mergeShortGaps(keep, seg.base, end)
	s.log.mu.RLock()
	compacted := seg.compacted || s.log.sparse
	s.log.mu.RUnlock()
	whole := len(keep) == 1 && keep[0].lo == seg.base && keep[0].hi == end && keep[0].data == nil
	if removed == 0 && (compacted || whole) {
		return nil
	}
	samples, err := s.samplesIn(seg.base, end)
	if err != nil {
		return err
	}
	if err := s.log.rewrite(seg, keep, samples, s.repointSamples); err != nil {
		return err
	}
	res.SegmentsRewritten++
	res.EventsRemoved += events
	res.BytesRemoved += removed
	return nil
}

// piece is a range of a segment's logical bytes that a scavenge keeps:
// the bytes there, or data instead when set (a stub).
type piece struct {
	lo, hi uint64
	data   []byte
}

// mergeShortGaps joins the pieces of keep, in [lo, hi), that less than a
// skip frame separates, and extends the first and last to lo and hi if
// that close. Gaps are whole frames, never that short, and a stub is cut
// only where a skip frame fits after it, so this is a safeguard.
func mergeShortGaps(keep []piece, lo, hi uint64) []piece {
	var out []piece
	for _, k := range keep {
		n := len(out)
		switch {
		case n > 0 && k.lo-out[n-1].hi < skipFrameSize && out[n-1].data == nil && k.data == nil:
			out[n-1].hi = k.hi
			continue
		case n == 0 && k.lo-lo < skipFrameSize && k.data == nil:
			k.lo = lo
		}
		out = append(out, k)
	}
	if n := len(out); n > 0 && hi-out[n-1].hi < skipFrameSize && out[n-1].data == nil {
		out[n-1].hi = hi
	}
	return out
}

// sampleRef is a sample of the position file: its index and position.
type sampleRef struct {
	index int
	pos   uint64
}

// samplesIn returns the samples of the position file in [lo, hi). Those
// of closed segments the checkpoint covers are all there: the memtables'
// are after the checkpoint.
func (s *Store) samplesIn(lo, hi uint64) ([]sampleRef, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []sampleRef
	var b [8]byte
	var err error
	i := sort.Search(int(s.posCount), func(i int) bool {
		if err != nil {
			return true
		}
		if _, err = s.posFile.ReadAt(b[:], int64(i)*8); err != nil {
			return true
		}
		return binary.LittleEndian.Uint64(b[:]) >= lo
	})
	for ; err == nil && i < int(s.posCount); i++ {
		if _, err = s.posFile.ReadAt(b[:], int64(i)*8); err != nil {
			break
		}
		p := binary.LittleEndian.Uint64(b[:])
		if p >= hi {
			break
		}
		out = append(out, sampleRef{index: i, pos: p})
	}
	return out, errors.Wrap(err, "read position file")
}

// repointSamples makes the samples that fall inside removed runs point at
// their run's start, where the skip frame is, and syncs the position file.
// Both places are frame starts in the old segment, so a crash before the
// segment is replaced leaves a valid index.
func (s *Store) repointSamples(moves []sampleRef) error {
	if len(moves) == 0 {
		return nil
	}
	s.mu.Lock()
	var err error
	for _, m := range moves {
		if _, err = s.posFile.WriteAt(binary.LittleEndian.AppendUint64(nil, m.pos), int64(m.index)*8); err != nil {
			break
		}
	}
	s.mu.Unlock()
	if err != nil {
		return errors.Wrap(err, "write position file")
	}
	return errors.Wrap(fdatasync(s.posFile), "sync position file")
}

// rewrite replaces seg's file by one that holds only the frames in keep
// (absolute ranges, in order): a compacted segment (see compact.go), or,
// for tests of older stores, a sparse one with the kept frames at their
// offsets and a skip frame at the start of each removed run. Before the new
// file replaces the old one, repoint is given the samples inside removed
// runs, moved to their run's start.
func (l *segmentLog) rewrite(seg *segment, keep []piece, samples []sampleRef, repoint func([]sampleRef) error) error {
	path := filepath.Join(l.dir, segmentName(seg.base))
	tmp := path + scavengeSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return errors.Wrapf(err, "create %s", tmp)
	}
	done := false
	defer func() {
		if !done {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	var moves []sampleRef
	gap := func(lo, hi uint64) {
		for _, sm := range samples {
			if sm.pos > lo && sm.pos < hi {
				moves = append(moves, sampleRef{index: sm.index, pos: lo})
			}
		}
	}
	end := seg.base + seg.size
	cursor := seg.base
	for _, k := range keep {
		if cursor < k.lo {
			gap(cursor, k.lo)
		}
		cursor = k.hi
	}
	if cursor < end {
		gap(cursor, end)
	}
	var m *compactMap
	if l.sparse {
		err = l.writeSparse(f, seg, keep)
	} else {
		err = l.writeCompacted(f, seg, keep)
		if err == nil {
			var info os.FileInfo
			if info, err = f.Stat(); err == nil {
				m, err = readCompactMap(f, info.Size())
			}
		}
	}
	if err != nil {
		return err
	}
	if err := l.io.sync(f); err != nil {
		return errors.Wrapf(err, "sync %s", tmp)
	}
	if err := l.markScavenged(); err != nil {
		return err
	}
	if err := repoint(moves); err != nil {
		return err
	}
	if l.crashAt != nil {
		if err := l.crashAt("before rename", tmp); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Wrapf(err, "rename %s", tmp)
	}
	done = true
	if l.crashAt != nil {
		if err := l.crashAt("after rename", tmp); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := syncDir(l.dir); err != nil {
		// The rename happened: serve the new file all the same.
		l.swap(seg, f, m)
		return err
	}
	l.swap(seg, f, m)
	return nil
}

// writeSparse writes to f the sparse form of seg that scavenges wrote
// before segments were compacted: the frames in keep at their offsets, a
// skip frame at the start of each removed run and a hole after it.
func (l *segmentLog) writeSparse(f *os.File, seg *segment, keep []piece) error {
	write := func(b []byte, at uint64) error {
		if _, err := l.io.writeAt(f, b, int64(at-seg.base)); err != nil {
			return errors.Wrapf(err, "write %s", f.Name())
		}
		return nil
	}
	end := seg.base + seg.size
	cursor := seg.base
	for _, k := range keep {
		if cursor < k.lo {
			if err := write(encodeSkip(k.lo-cursor), cursor); err != nil {
				return err
			}
		}
		if err := l.copyPiece(k, write); err != nil {
			return err
		}
		cursor = k.hi
	}
	if cursor < end {
		if err := write(encodeSkip(end-cursor), cursor); err != nil {
			return err
		}
	}
	return errors.Wrapf(f.Truncate(int64(seg.size)), "size %s", f.Name())
}

// copyPiece hands write what piece k keeps, with the logical position of
// each chunk: the stub it was cut to, or its frames read from l in chunks.
func (l *segmentLog) copyPiece(k piece, write func(b []byte, at uint64) error) error {
	if k.data != nil {
		return write(k.data, k.lo)
	}
	for at := k.lo; at < k.hi; {
		n := min(k.hi-at, maxScanRead)
		b, err := l.readAt(at, int(n))
		if err != nil {
			return err
		}
		if err := write(b, at); err != nil {
			return err
		}
		at += n
	}
	return nil
}

// swap makes readers use f, compacted if m is its map, for seg and closes
// the old file; a read under way on it reads again (see readAt and
// frameAt). The old file's map leaves the cache; f's is loaded when read.
func (l *segmentLog) swap(seg *segment, f *os.File, m *compactMap) {
	l.mu.Lock()
	old := seg.file
	seg.file, seg.compacted = f, m != nil
	l.maps.drop(seg)
	l.mu.Unlock()
	l.gen.Add(1)
	_ = old.Close()
}

// markScavenged creates the SCAVENGED marker once.
func (l *segmentLog) markScavenged() error {
	if l.skipped.Load() {
		return nil
	}
	path := filepath.Join(l.dir, scavengedName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return errors.Wrapf(err, "create %s", path)
	}
	if err := errors.CombineErrors(f.Sync(), f.Close()); err != nil {
		return errors.Wrapf(err, "sync %s", path)
	}
	if err := syncDir(l.dir); err != nil {
		return err
	}
	l.skipped.Store(true)
	return nil
}

// removeScavengeLeftovers deletes the .scavenge files of a scavenge that a
// crash interrupted (the segments they were meant to replace are whole) and
// notes whether the log was ever scavenged.
func (l *segmentLog) removeScavengeLeftovers() error {
	names, err := os.ReadDir(l.dir)
	if err != nil {
		return errors.Wrapf(err, "list data directory %s", l.dir)
	}
	for _, n := range names {
		switch name := n.Name(); {
		case name == scavengedName:
			l.skipped.Store(true)
		case filepath.Ext(name) == scavengeSuffix:
			if err := os.Remove(filepath.Join(l.dir, name)); err != nil {
				return errors.Wrap(err, "remove an interrupted scavenge's file")
			}
		}
	}
	return nil
}

// roll closes the segment being written, for a scavenge; a failure counts
// as rollIfFull's does. Only the writer calls it.
func (s *Store) roll() error {
	if err := s.refusal(); err != nil {
		return err
	}
	err := s.log.roll()
	if err != nil && !errors.Is(err, ErrNoSpace) {
		s.fail(err)
	}
	return err
}
