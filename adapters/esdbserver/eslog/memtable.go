package eslog

import (
	"cmp"
	"slices"
)

// ientry is one entry of the stream index: revision rev of the stream whose
// name hashes to h is in the frame that starts at log offset pos.
// Tombstones are entries with rev tombstoneRev.
type ientry struct {
	h, rev, pos uint64
}

func compareEntries(a, b ientry) int {
	if c := cmp.Compare(a.h, b.h); c != 0 {
		return c
	}
	if c := cmp.Compare(a.rev, b.rev); c != 0 {
		return c
	}
	return cmp.Compare(a.pos, b.pos)
}

// memStream is a stream's part of a memtable: the frames of its revisions
// first, first+1, ... (revisions are contiguous, so a slice does).
type memStream struct {
	h          uint64
	first      uint64
	frames     []uint64
	tombstoned bool
	tombstone  uint64
}

// memtable indexes the frames of one range of the log, [from, to), in
// memory. The writer fills the active one; when it holds enough entries it
// is frozen, written as a table by the index worker, and dropped.
type memtable struct {
	streams map[string]*memStream
	entries int
	from    uint64
	// to is the end of the last frame applied; lastFrame and lastSum are
	// that frame's start and checksum, which a checkpoint records so that
	// open can tell that the log still holds it.
	to        uint64
	lastFrame uint64
	lastSum   uint32
	// lastEvent is the position of the last event in [0, to), if hasEvent.
	lastEvent uint64
	hasEvent  bool
	// samples are frame starts in [from, to), sparse (see sampleGap).
	samples []uint64
}

func newMemtable(from uint64, prev *memtable) *memtable {
	m := &memtable{streams: map[string]*memStream{}, from: from, to: from}
	if prev != nil {
		m.lastFrame, m.lastSum, m.lastEvent, m.hasEvent = prev.lastFrame, prev.lastSum, prev.lastEvent, prev.hasEvent
	}
	return m
}

func (m *memtable) stream(name string) *memStream {
	ms := m.streams[name]
	if ms == nil {
		ms = &memStream{h: hashOf(name)}
		m.streams[name] = ms
	}
	return ms
}

// addEvents records that revisions first.. first+n-1 of name are in the
// frame at pos.
func (m *memtable) addEvents(name string, first uint64, n int, pos uint64) {
	ms := m.stream(name)
	if len(ms.frames) == 0 {
		ms.first = first
	}
	for range n {
		ms.frames = append(ms.frames, pos)
	}
	m.entries += n
}

func (m *memtable) addTombstone(name string, pos uint64) {
	ms := m.stream(name)
	ms.tombstoned, ms.tombstone = true, pos
	m.entries++
}

// last returns the last revision of name the memtable holds.
func (m *memtable) last(name string) (int64, bool) {
	ms := m.streams[name]
	if ms == nil || len(ms.frames) == 0 {
		return 0, false
	}
	return int64(ms.first) + int64(len(ms.frames)) - 1, true
}

// collect appends the frames of revisions lo..hi of name to out.
func (m *memtable) collect(name string, lo, hi uint64, out []ientry) []ientry {
	ms := m.streams[name]
	if ms == nil || len(ms.frames) == 0 {
		return out
	}
	end := ms.first + uint64(len(ms.frames)) - 1
	for r := max(lo, ms.first); r <= min(hi, end); r++ {
		out = append(out, ientry{h: ms.h, rev: r, pos: ms.frames[r-ms.first]})
	}
	return out
}

// sorted returns the memtable's entries in index order.
func (m *memtable) sorted() []ientry {
	out := make([]ientry, 0, m.entries)
	for _, ms := range m.streams {
		for i, pos := range ms.frames {
			out = append(out, ientry{h: ms.h, rev: ms.first + uint64(i), pos: pos})
		}
		if ms.tombstoned {
			out = append(out, ientry{h: ms.h, rev: tombstoneRev, pos: ms.tombstone})
		}
	}
	slices.SortFunc(out, compareEntries)
	return out
}
