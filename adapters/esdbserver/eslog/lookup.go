package eslog

import (
	"encoding/binary"
	"hash/crc32"
	"slices"

	"github.com/cockroachdb/errors"
)

// state returns the state of stream name, from the cache or else from the
// index, and caches it. The caller holds s.mu (either way) or is Open.
func (s *Store) state(name string) (*streamState, error) {
	if st := s.cache.get(name); st != nil {
		return st, nil
	}
	st := &streamState{name: name}
	var err error
	if st.last, st.tombstoned, err = s.lastOf(name); err != nil {
		return nil, err
	}
	if st.meta, err = s.metaOf(name); err != nil {
		return nil, err
	}
	s.cache.put(st)
	return st, nil
}

// metaOf reads name's metadata: the newest $metadata event of $$name.
func (s *Store) metaOf(name string) (streamMeta, error) {
	mstream := MetadataStreamOf(name)
	last, _, err := s.lastOf(mstream)
	if err != nil || last == NoStream {
		return streamMeta{}, err
	}
	for r := last; r >= 0; r-- {
		found, err := s.entriesOf(mstream, uint64(r), uint64(r))
		if err != nil {
			return streamMeta{}, err
		}
		evs, err := s.eventsAt(mstream, found)
		if err != nil {
			return streamMeta{}, err
		}
		if len(evs) == 1 && evs[0].Type == MetadataEventType {
			return parseMeta(evs[0].Data), nil
		}
	}
	return streamMeta{}, nil
}

// lastOf returns name's last revision (or NoStream) and whether it is
// tombstoned, looking from the newest part of the index to the oldest. A
// tombstone is always after the stream's last event, so it is in the part
// that holds that event or in a newer one. The caller holds s.mu.
func (s *Store) lastOf(name string) (int64, bool, error) {
	tombstoned := false
	for _, m := range []*memtable{s.mem, s.frozen} {
		if m == nil {
			continue
		}
		if ms := m.streams[name]; ms != nil {
			tombstoned = tombstoned || ms.tombstoned
			if last, ok := m.last(name); ok {
				return last, tombstoned, nil
			}
		}
	}
	h := hashOf(name)
	for i := len(s.tables) - 1; i >= 0; i-- {
		t := s.tables[i]
		if !t.mayContain(h) {
			continue
		}
		top, ok, tombs, err := t.top(h)
		if err != nil {
			return 0, false, err
		}
		for _, e := range tombs {
			if !tombstoned {
				if tombstoned, err = s.frameIs(e.pos, kindTombstone, name); err != nil {
					return 0, false, err
				}
			}
		}
		if !ok {
			continue
		}
		mine, err := s.frameIs(top.pos, kindAppend, name)
		if err != nil {
			return 0, false, err
		}
		if mine {
			return int64(top.rev), tombstoned, nil
		}
		// Another stream has the same hash (rare): look at every entry
		// of the hash in this table.
		last := NoStream
		var scanErr error
		err = t.scan(h, 0, tombstoneRev-1, func(e ientry) bool {
			mine, scanErr = s.frameIs(e.pos, kindAppend, name)
			if mine {
				last = int64(e.rev)
			}
			return scanErr == nil
		})
		if err = errors.CombineErrors(err, scanErr); err != nil {
			return 0, false, err
		}
		if last != NoStream {
			return last, tombstoned, nil
		}
	}
	return NoStream, tombstoned, nil
}

// frameIs reports whether the frame at pos is of kind for stream name.
func (s *Store) frameIs(pos uint64, kind byte, name string) (bool, error) {
	body, err := s.log.frameAt(pos)
	if errors.Is(err, errGone) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	d := decoder{b: body}
	k := d.byte()
	if k == kindStub && kind == kindAppend {
		k = kindAppend // a stub stands for its stream's last event
	}
	if k != kind {
		return false, nil
	}
	stream := d.bytes()
	if d.err != nil {
		return false, errors.Wrapf(ErrCorrupt, "frame at %d", pos)
	}
	return k == kind && string(stream) == name, nil
}

// entriesOf returns the index entries of revisions lo..hi of name, sorted
// by revision. With a hash shared by another stream they include that
// stream's entries too; eventsAt drops them. The caller holds s.mu.
func (s *Store) entriesOf(name string, lo, hi uint64) ([]ientry, error) {
	var out []ientry
	h := hashOf(name)
	for _, t := range s.tables {
		if !t.mayContain(h) {
			continue
		}
		if err := t.scan(h, lo, hi, func(e ientry) bool { out = append(out, e); return true }); err != nil {
			return nil, err
		}
	}
	for _, m := range []*memtable{s.frozen, s.mem} {
		if m != nil {
			out = m.collect(name, lo, hi, out)
		}
	}
	slices.SortStableFunc(out, compareEntries)
	return out, nil
}

// eventsAt reads the events the entries point at and returns those of
// stream name, in the entries' order. It needs no lock: committed frames
// never change.
func (s *Store) eventsAt(name string, entries []ientry) ([]RecordedEvent, error) {
	out := make([]RecordedEvent, 0, len(entries))
	var framePos uint64
	var body []byte
	var f appendFrame
	var names lastNames
	for _, e := range entries {
		if body == nil || e.pos != framePos {
			b, err := s.log.frameAt(e.pos)
			if errors.Is(err, errGone) {
				continue // scavenged
			}
			if err != nil {
				return nil, err
			}
			d := decoder{b: b}
			if d.byte() != kindAppend {
				continue
			}
			if f, err = decodeAppend(&d); err != nil {
				return nil, errors.Wrapf(ErrCorrupt, "append frame at %d: %v", e.pos, err)
			}
			body, framePos = b, e.pos
		}
		if f.stream != name || e.rev < f.firstRevision || e.rev-f.firstRevision >= uint64(len(f.events)) {
			continue
		}
		span := f.events[e.rev-f.firstRevision]
		ev, err := decodeEvent(body[span.offset:span.offset+span.length], &names)
		if err != nil {
			return nil, errors.Wrapf(ErrCorrupt, "event of frame at %d: %v", e.pos, err)
		}
		out = append(out, RecordedEvent{
			ProposedEvent: ev,
			Stream:        name,
			Revision:      e.rev,
			Position:      e.pos + frameHeaderSize + uint64(span.offset),
			Created:       f.created,
		})
	}
	return out, nil
}

// frameAt reads the committed frame that starts at pos, checks its
// checksum and returns its body: a skip frame's if scavenge removed the
// frame and left one there, errGone if it left zeros. It reads again if
// scavenge replaced the segment file while it read.
func (l *segmentLog) frameAt(pos uint64) ([]byte, error) {
	for {
		gen := l.gen.Load()
		body, err := l.readFrame(pos)
		if err == nil || errors.Is(err, errGone) || l.gen.Load() == gen {
			return body, err
		}
	}
}

func (l *segmentLog) readFrame(pos uint64) ([]byte, error) {
	hdr, err := l.readAt(pos, frameHeaderSize)
	if err != nil {
		return nil, err
	}
	if l.skipped.Load() && binary.LittleEndian.Uint64(hdr) == 0 {
		return nil, errGone
	}
	n := binary.LittleEndian.Uint32(hdr)
	if n == 0 || n > maxFrameSize {
		return nil, errors.Wrapf(ErrCorrupt, "frame at %d has length %d", pos, n)
	}
	body, err := l.readAt(pos+frameHeaderSize, int(n))
	if err != nil {
		return nil, err
	}
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(hdr[4:]) {
		return nil, errors.Wrapf(ErrCorrupt, "frame at %d: checksum mismatch", pos)
	}
	return body, nil
}
