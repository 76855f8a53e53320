package eslog

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/cockroachdb/errors"
)

// The index directory (DIR/index) holds the tables, the sparse position
// file and the checkpoint that names them:
//
//	CHECKPOINT  what the index covers: the log up to a frame boundary
//	            ("through"), the tables that hold it, how many samples of the
//	            position file are valid; written to CHECKPOINT.tmp, synced,
//	            renamed over CHECKPOINT, and the directory synced
//	positions   sparse frame starts of the log, little-endian uint64s
//	table-N.idx the tables
//
// A table or sample is written and synced before the checkpoint that
// mentions it, and a table is deleted only after a checkpoint that no longer
// mentions it, so a crash at any point leaves a checkpoint whose files are
// whole. Open deletes files the checkpoint does not name.
const (
	indexDirName   = "index"
	checkpointName = "CHECKPOINT"
	positionsName  = "positions"
	ckptMagic      = 0x31305450434c5345 // "ESLCPT01"
)

type tableRef struct {
	seq   uint64
	count uint64
}

type checkpoint struct {
	through    uint64
	lastFrame  uint64
	lastSum    uint32
	lastEvent  uint64
	hasEvent   bool
	samples    uint64
	lastSample uint64
	nextSeq    uint64
	tables     []tableRef
}

func (c *checkpoint) encode() []byte {
	b := binary.LittleEndian.AppendUint64(nil, ckptMagic)
	for _, v := range []uint64{c.through, c.lastFrame, uint64(c.lastSum), c.lastEvent, boolInt(c.hasEvent), c.samples, c.lastSample, c.nextSeq, uint64(len(c.tables))} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	for _, t := range c.tables {
		b = binary.LittleEndian.AppendUint64(b, t.seq)
		b = binary.LittleEndian.AppendUint64(b, t.count)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func boolInt(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func decodeCheckpoint(b []byte) (checkpoint, error) {
	var c checkpoint
	if len(b) < 8+9*8+4 || crc32.Checksum(b[:len(b)-4], castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return c, errors.New("checkpoint checksum mismatch or file cut short")
	}
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8+8*i:]) }
	if binary.LittleEndian.Uint64(b) != ckptMagic {
		return c, errors.New("not a checkpoint")
	}
	c.through, c.lastFrame, c.lastSum, c.lastEvent = u(0), u(1), uint32(u(2)), u(3)
	c.hasEvent, c.samples, c.lastSample, c.nextSeq = u(4) == 1, u(5), u(6), u(7)
	n := u(8)
	if uint64(len(b)) != 8+9*8+16*n+4 {
		return c, errors.New("checkpoint size does not match its table count")
	}
	for i := range n {
		c.tables = append(c.tables, tableRef{seq: u(9 + 2*int(i)), count: u(10 + 2*int(i))})
	}
	return c, nil
}

// writeCheckpoint replaces the checkpoint atomically.
func writeCheckpoint(dir string, c checkpoint) error {
	tmp := filepath.Join(dir, checkpointName+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return errors.Wrap(err, "create index checkpoint")
	}
	if _, err := f.Write(c.encode()); err != nil {
		_ = f.Close()
		return errors.Wrap(err, "write index checkpoint")
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return errors.Wrap(err, "sync index checkpoint")
	}
	if err := f.Close(); err != nil {
		return errors.Wrap(err, "close index checkpoint")
	}
	if err := os.Rename(tmp, filepath.Join(dir, checkpointName)); err != nil {
		return errors.Wrap(err, "rename index checkpoint")
	}
	return syncDir(dir)
}

// openIndex loads the checkpoint and the files it names and returns where
// the log must be replayed from. A checkpoint that is damaged, names a
// missing or damaged file, or does not match the log (the log is shorter,
// or the frame it ends with is not there) is dropped with a warning, and
// the whole log is replayed: the index is derived data, the log is the
// truth.
func (s *Store) openIndex() (uint64, error) {
	s.idxDir = filepath.Join(s.opts.Dir, indexDirName)
	if err := os.MkdirAll(s.idxDir, 0o755); err != nil {
		return 0, errors.Wrapf(err, "create index directory %s", s.idxDir)
	}
	c, err := s.loadIndex()
	if err != nil {
		s.opts.Logger.Warn("event store: index checkpoint unusable; rebuilding the index from the whole log", "dir", s.idxDir, "error", err)
		s.closeIndexFiles()
		c = checkpoint{}
	}
	if err := s.cleanIndexDir(c); err != nil {
		return 0, err
	}
	if s.posFile == nil {
		f, err := os.OpenFile(filepath.Join(s.idxDir, positionsName), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return 0, errors.Wrap(err, "create position file")
		}
		s.posFile = f
	}
	s.ckpt = c
	s.ckptLastFrame.Store(c.lastFrame)
	s.ckptThrough.Store(c.through)
	s.posCount = c.samples
	s.lastSample = c.lastSample
	s.mem = &memtable{streams: map[string]*memStream{}, from: c.through, to: c.through,
		lastFrame: c.lastFrame, lastSum: c.lastSum, lastEvent: c.lastEvent, hasEvent: c.hasEvent}
	return c.through, nil
}

func (s *Store) loadIndex() (checkpoint, error) {
	b, err := os.ReadFile(filepath.Join(s.idxDir, checkpointName))
	if os.IsNotExist(err) {
		return checkpoint{}, nil
	}
	if err != nil {
		return checkpoint{}, errors.Wrap(err, "read checkpoint")
	}
	c, err := decodeCheckpoint(b)
	if err != nil {
		return c, err
	}
	if c.through > 0 {
		if end := s.log.end(); c.through > end {
			return c, errors.Newf("checkpoint covers the log up to %d, but the log ends at %d", c.through, end)
		}
		hdr, err := s.log.readAt(c.lastFrame, frameHeaderSize)
		if err != nil {
			return c, errors.Wrapf(err, "read the checkpoint's last frame at %d", c.lastFrame)
		}
		if c.lastFrame+frameHeaderSize+uint64(binary.LittleEndian.Uint32(hdr)) != c.through || binary.LittleEndian.Uint32(hdr[4:]) != c.lastSum {
			return c, errors.Newf("the log does not hold the checkpoint's last frame at %d", c.lastFrame)
		}
	}
	for _, ref := range c.tables {
		t, err := openTable(s.idxDir, ref.seq, int(ref.count))
		if err != nil {
			return c, err
		}
		s.tables = append(s.tables, t)
	}
	f, err := os.OpenFile(filepath.Join(s.idxDir, positionsName), os.O_RDWR, 0o644)
	if err != nil {
		return c, errors.Wrap(err, "open position file")
	}
	s.posFile = f
	info, err := f.Stat()
	if err != nil {
		return c, errors.Wrap(err, "stat position file")
	}
	if uint64(info.Size()) < c.samples*8 {
		return c, errors.Newf("position file has %d bytes, the checkpoint counts %d samples", info.Size(), c.samples)
	}
	// Samples written after the checkpoint by a flush that did not finish
	// are cut; the replay records them again.
	if err := f.Truncate(int64(c.samples * 8)); err != nil {
		return c, errors.Wrap(err, "cut position file")
	}
	return c, nil
}

func (s *Store) closeIndexFiles() {
	// Under the lock readers take: a read may still be under way, and a
	// closed table's fence and filter are unmapped.
	s.mu.Lock()
	for _, t := range s.tables {
		_ = t.close()
	}
	s.tables = nil
	s.mu.Unlock()
	if s.posFile != nil {
		_ = s.posFile.Close()
		s.posFile = nil
	}
}

// cleanIndexDir removes every file of the index directory that c does not
// name: tables of a flush or merge that a crash interrupted, a temporary
// checkpoint, or everything when the index is rebuilt.
func (s *Store) cleanIndexDir(c checkpoint) error {
	keep := map[string]bool{}
	for _, t := range c.tables {
		keep[tableName(t.seq)] = true
	}
	if s.posFile != nil {
		keep[positionsName] = true
		keep[checkpointName] = true
	}
	names, err := os.ReadDir(s.idxDir)
	if err != nil {
		return errors.Wrap(err, "list index directory")
	}
	removed := false
	for _, n := range names {
		if keep[n.Name()] {
			continue
		}
		if err := os.Remove(filepath.Join(s.idxDir, n.Name())); err != nil {
			return errors.Wrap(err, "remove stale index file")
		}
		removed = true
	}
	if removed {
		return syncDir(s.idxDir)
	}
	return nil
}

// sampleGap is the most log bytes between two recorded frame starts
// (samples), unless one frame is longer: a read of $all from a position
// starts decoding at the sample at or before it.
const sampleGap = 32 << 10

// floorSample returns the greatest sample at or before pos; 0, where the
// log starts, when there is none. The caller holds s.mu.
func (s *Store) floorSample(pos uint64) (uint64, error) {
	for _, m := range []*memtable{s.mem, s.frozen} {
		if m == nil {
			continue
		}
		if i := sort.Search(len(m.samples), func(i int) bool { return m.samples[i] > pos }); i > 0 {
			return m.samples[i-1], nil
		}
	}
	var b [8]byte
	var err error
	i := sort.Search(int(s.posCount), func(i int) bool {
		if err != nil {
			return true
		}
		if _, err = s.posFile.ReadAt(b[:], int64(i)*8); err != nil {
			return true
		}
		return binary.LittleEndian.Uint64(b[:]) > pos
	})
	if err != nil {
		return 0, errors.Wrap(err, "read position file")
	}
	if i == 0 {
		return 0, nil
	}
	if _, err := s.posFile.ReadAt(b[:], int64(i-1)*8); err != nil {
		return 0, errors.Wrap(err, "read position file")
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// maybeFreeze freezes the active memtable once it is full and no other is
// being flushed, and wakes the index worker. The caller holds s.mu for
// writing (or is Open).
func (s *Store) maybeFreeze() bool {
	if s.mem.entries < s.opts.IndexMemtableEntries {
		return false
	}
	if s.frozen == nil {
		s.frozen = s.mem
		s.mem = newMemtable(s.frozen.to, s.frozen)
	}
	select {
	case s.flushReq <- struct{}{}:
	default:
	}
	return true
}

// indexWorker writes frozen memtables as tables and merges tables, one job
// at a time, until the store closes.
func (s *Store) indexWorker() {
	defer close(s.idxDone)
	for {
		select {
		case <-s.flushReq:
			if err := s.flushFrozen(); err != nil {
				// The frozen memtable stays in memory and serves reads; the
				// next full memtable tries again.
				s.opts.Logger.Error("event store: index flush failed; will retry", "error", err)
			}
		case <-s.idxStop:
			return
		}
	}
}

// flushFrozen writes the frozen memtable as a table, records it in a new
// checkpoint, drops the memtable and merges tables where due. Only the index
// worker (or Open, before it starts) calls it.
func (s *Store) flushFrozen() error {
	if err := s.writeFrozen(); err != nil {
		return err
	}
	return s.mergeTables()
}

// flushOnClose writes the memtables to tables when the store closes
// cleanly, so that the next open replays no log: a restart after a clean
// shutdown then costs the same whatever the history's length. It leaves
// merging to the next flush, and does nothing after a disk failure (the
// log is cut back to its last good frame at the next open, and the index
// checkpoint must not name what it cuts). A failure is logged, not
// returned: the index checkpoint before it stays valid, and the next open
// replays the log after it as after a crash. Only Close calls it, after
// the writer and the index worker stopped.
func (s *Store) flushOnClose() {
	if s.failure.Load() != nil || s.opts.closeAsCrash {
		return
	}
	for range 2 { // a frozen memtable left by the worker, then the active one
		// Under the lock readers take: a read may still be under way.
		s.mu.Lock()
		if s.frozen == nil && s.mem.entries > 0 {
			s.frozen = s.mem
			s.mem = newMemtable(s.frozen.to, s.frozen)
		}
		frozen := s.frozen
		s.mu.Unlock()
		if frozen == nil {
			return
		}
		if err := s.writeFrozen(); err != nil {
			s.opts.Logger.Warn("event store: index not written at close; the next open replays the log after its checkpoint", "error", err)
			return
		}
	}
}

// writeFrozen writes the frozen memtable as a table and records it in a new
// checkpoint, which drops the memtable.
func (s *Store) writeFrozen() error {
	s.mu.RLock()
	fz, tables := s.frozen, slices.Clone(s.tables)
	s.mu.RUnlock()
	if fz == nil {
		return nil
	}
	c := s.ckpt
	t, err := writeTable(s.idxDir, c.nextSeq, sliceIterator(fz.sorted()))
	if err != nil {
		return err
	}
	if err := s.finishFlush(c, fz, append(tables, t)); err != nil {
		_ = t.close()
		return err
	}
	return nil
}

func (s *Store) finishFlush(c checkpoint, fz *memtable, tables []*table) error {
	c.nextSeq++
	if len(fz.samples) > 0 {
		b := make([]byte, 0, 8*len(fz.samples))
		for _, p := range fz.samples {
			b = binary.LittleEndian.AppendUint64(b, p)
		}
		if _, err := s.posFile.WriteAt(b, int64(c.samples*8)); err != nil {
			return errors.Wrap(err, "write position file")
		}
		if err := fdatasync(s.posFile); err != nil {
			return errors.Wrap(err, "sync position file")
		}
		c.samples += uint64(len(fz.samples))
		c.lastSample = fz.samples[len(fz.samples)-1]
	}
	c.through, c.lastFrame, c.lastSum, c.lastEvent, c.hasEvent = fz.to, fz.lastFrame, fz.lastSum, fz.lastEvent, fz.hasEvent
	return s.commitIndex(c, tables, nil, true)
}

// commitIndex writes checkpoint c naming tables, makes tables the ones
// readers use (dropping the frozen memtable, whose entries are now in
// them, if flushed), then closes and deletes the tables in drop.
func (s *Store) commitIndex(c checkpoint, tables, drop []*table, flushed bool) error {
	c.tables = c.tables[:0:0]
	for _, t := range tables {
		c.tables = append(c.tables, tableRef{seq: t.seq, count: uint64(t.count)})
	}
	if err := syncDir(s.idxDir); err != nil {
		return err
	}
	if err := writeCheckpoint(s.idxDir, c); err != nil {
		return err
	}
	s.ckpt = c
	s.ckptLastFrame.Store(c.lastFrame)
	s.ckptThrough.Store(c.through)
	s.mu.Lock()
	s.tables = tables
	s.posCount = c.samples
	if flushed {
		s.frozen = nil
	}
	s.mu.Unlock()
	// Readers use tables only under s.mu, so none uses the dropped ones now.
	for _, t := range drop {
		_ = t.close()
		if err := os.Remove(t.path); err != nil {
			s.opts.Logger.Warn("event store: could not remove a merged index table", "table", t.path, "error", err)
		}
	}
	return nil
}

// mergeTables merges the two newest tables while the older is no bigger
// than the newer, like a binary counter: there are O(log n) tables and each
// entry is rewritten O(log n) times. A merge drops the entries of frames
// that scavenge removed from compacted segments.
func (s *Store) mergeTables() error {
	for {
		s.mu.RLock()
		tables := slices.Clone(s.tables)
		s.mu.RUnlock()
		n := len(tables)
		if n < 2 || tables[n-2].count > tables[n-1].count {
			return nil
		}
		a, b := tables[n-2], tables[n-1]
		c := s.ckpt
		m, err := writeTable(s.idxDir, c.nextSeq, s.log.withoutRemoved(mergeIterators(a.iterator(), b.iterator())))
		if err != nil {
			return errors.Wrapf(err, "merge index tables %s and %s", a.path, b.path)
		}
		c.nextSeq++
		if err := s.commitIndex(c, append(tables[:n-2:n-2], m), []*table{a, b}, false); err != nil {
			_ = m.close()
			return err
		}
	}
}
