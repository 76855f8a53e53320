package eslog

import (
	"encoding/json"
	"sort"
	"strings"
	"time"
)

// entry indexes one event of the log. Bodies stay on disk.
type entry struct {
	pos     uint64
	length  uint32
	rev     uint64
	created int64
	stream  *streamState
	typ     string
	id      [16]byte
}

const chunkBits = 12

// entryLog is the $all index: entries in position order, stored in fixed-size
// chunks so that appending never moves an existing entry.
type entryLog struct {
	chunks [][]entry
	n      int
}

func (l *entryLog) add(e entry) int {
	if l.n>>chunkBits == len(l.chunks) {
		l.chunks = append(l.chunks, make([]entry, 0, 1<<chunkBits))
	}
	c := &l.chunks[l.n>>chunkBits]
	*c = append(*c, e)
	l.n++
	return l.n - 1
}

func (l *entryLog) at(i int) *entry { return &l.chunks[i>>chunkBits][i&(1<<chunkBits-1)] }

// search returns the index of the first entry with position >= pos.
func (l *entryLog) search(pos uint64) int {
	return sort.Search(l.n, func(i int) bool { return l.at(i).pos >= pos })
}

// streamMeta is a stream's metadata as set through its $$ stream.
type streamMeta struct {
	maxCount       uint64
	maxAge         time.Duration
	truncateBefore uint64
	raw            map[string]any
}

// parseMeta reads the fields the server honours from a $metadata event; a
// field of the wrong type is ignored, as EventStoreDB does.
func parseMeta(data []byte) streamMeta {
	var m streamMeta
	if err := json.Unmarshal(data, &m.raw); err != nil || m.raw == nil {
		m.raw = map[string]any{}
		return m
	}
	if v, ok := m.raw["$maxCount"].(float64); ok && v > 0 {
		m.maxCount = uint64(v)
	}
	if v, ok := m.raw["$maxAge"].(float64); ok && v > 0 {
		m.maxAge = time.Duration(v * float64(time.Second))
	}
	if v, ok := m.raw["$tb"].(float64); ok && v > 0 {
		m.truncateBefore = uint64(v)
	}
	return m
}

// streamState is the index of one stream. Revisions are contiguous from
// zero, so revs[r] is the entry of revision r.
type streamState struct {
	name       string
	revs       []int
	tombstoned bool
	meta       streamMeta
}

func (s *streamState) lastRevision() int64 { return int64(len(s.revs)) - 1 }

// softDeleted reports whether every event is truncated by $tb.
func (s *streamState) softDeleted() bool {
	return s.meta.truncateBefore > 0 && int64(s.meta.truncateBefore) > s.lastRevision()
}

// current is the revision used for expected-revision checks.
func (s *streamState) current() int64 {
	if s == nil || s.softDeleted() {
		return NoStream
	}
	return s.lastRevision()
}

// isMetadataStream reports whether name is a $$ metadata stream.
func isMetadataStream(name string) bool { return strings.HasPrefix(name, "$$") }

// firstReadable is the lowest revision a read may return, given $tb,
// $maxCount and, for $$ streams, that only the newest metadata is kept.
func (s *streamState) firstReadable() uint64 {
	first := s.meta.truncateBefore
	count := s.meta.maxCount
	if isMetadataStream(s.name) {
		count = 1
	}
	if n := uint64(len(s.revs)); count > 0 && n > count && n-count > first {
		first = n - count
	}
	return first
}
