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
