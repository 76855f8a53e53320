package eslog

import (
	"encoding/json"
	"math"
	"strings"
	"time"
)

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

// streamState is what the store knows of one stream besides where its
// events are: its last revision, whether it is tombstoned and its metadata.
// It is derived from the index (memtables and tables) and cached for hot
// streams; the writer updates a cached state in the same critical section
// in which it adds the stream's entries to the memtable, so a cached state
// always equals the one the index would give.
type streamState struct {
	name       string
	last       int64
	tombstoned bool
	meta       streamMeta
}

func (s *streamState) lastRevision() int64 { return s.last }

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
	if n := uint64(s.last + 1); count > 0 && n > count && n-count > first {
		first = n - count
	}
	return first
}

// tombstoneRev is the revision under which the index records a stream's
// tombstone frame; no event has it.
const tombstoneRev = math.MaxUint64

// streamHash is the 64-bit key of a stream name in the index. Two streams
// may share it: every lookup checks the stream name in the frame it finds.
// It must never change, since index files on disk are sorted by it.
func streamHash(name string) uint64 {
	x := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(name); i++ {
		x ^= uint64(name[i])
		x *= 1099511628211
	}
	// splitmix64's finaliser spreads FNV's weak low bits.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// hashOf is streamHash; tests replace it to make streams collide.
var hashOf = streamHash
