package eslog

import (
	"fmt"
	"os"
)

// WithFileIO returns opts with the disk writes and syncs replaced, so that
// tests can make them fail; a nil function keeps the real one.
func WithFileIO(opts Options, writeAt func(f *os.File, b []byte, off int64) (int, error), sync func(f *os.File) error) Options {
	opts.fileIO = fileIO{writeAt: writeAt, sync: sync}
	return opts
}

// WeakHash makes every stream name hash to its length modulo 3 until the
// test ends, so that most streams share a hash with others.
func WeakHash(t interface{ Cleanup(func()) }) {
	hashOf = func(name string) uint64 { return uint64(len(name) % 3) }
	t.Cleanup(func() { hashOf = streamHash })
}

// IndexFiles reports how many tables the index has and whether a memtable
// is being flushed.
func IndexFiles(s *Store) (tables int, frozen bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.tables), s.frozen != nil
}

// ClosingAsCrash returns opts with Close leaving the index as a crash
// would: the events since the last index checkpoint are replayed from the
// log at the next open.
func ClosingAsCrash(opts Options) Options {
	opts.closeAsCrash = true
	return opts
}

// VerifyingLastBytes returns opts with open checking only the last n bytes
// of the indexed log (at frame granularity) instead of verifiedLog.
func VerifyingLastBytes(opts Options, n uint64) Options {
	opts.verifiedLog = n
	return opts
}

// ScanPausing reads the whole log as a $all read does, calling pause after
// the first frames, and returns the events it met as stream@revision.
func ScanPausing(s *Store, after int, pause func()) ([]string, error) {
	gen := s.log.gen.Load()
	s.mu.RLock()
	head := s.mem.to
	s.mu.RUnlock()
	sc := s.scanner(0, head, gen)
	var out []string
	var names lastNames
	for n := 0; ; n++ {
		if n == after {
			pause()
		}
		pos, body, ok, err := sc.next()
		if err != nil || !ok {
			return out, err
		}
		evs, err := frameEvents(pos, body, nil, &names)
		if err != nil {
			return out, err
		}
		for _, e := range evs {
			out = append(out, fmt.Sprintf("%s@%d", e.stream, e.rev))
		}
	}
}

// ScavengingSparse returns opts with scavenge writing the sparse segments
// (skip frames and holes) of older versions instead of compacted ones.
func ScavengingSparse(opts Options) Options {
	opts.scavengeSparse = true
	return opts
}

// ScavengeCrashingAt returns opts with crashAt called at each step of a
// segment's replacement ("before rename", "after rename") with the path
// of the new file; an error it returns stops the scavenge there, as a crash
// would (but for the new file, which is removed if not renamed yet).
func ScavengeCrashingAt(opts Options, crashAt func(step, tmp string) error) Options {
	opts.scavengeCrashAt = crashAt
	return opts
}

// SegmentCompacted reports whether the segment starting at base is a
// compacted one, and its file's size.
func SegmentCompacted(s *Store, base uint64) (bool, int64) {
	s.log.mu.RLock()
	defer s.log.mu.RUnlock()
	for _, seg := range s.log.segs {
		if seg.base == base {
			info, err := seg.file.Stat()
			if err != nil {
				return seg.compacted, -1
			}
			return seg.compacted, info.Size()
		}
	}
	return false, -1
}

// IndexEntries returns how many entries the index tables hold.
func IndexEntries(s *Store) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, t := range s.tables {
		n += t.count
	}
	return n
}
