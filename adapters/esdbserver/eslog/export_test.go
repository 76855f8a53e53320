package eslog

import "os"

// WithFileIO returns opts with the disk writes and syncs replaced, so that
// tests can make them fail; a nil function keeps the real one.
func WithFileIO(opts Options, writeAt func(f *os.File, b []byte, off int64) (int, error), sync func(f *os.File) error) Options {
	opts.fileIO = fileIO{writeAt: writeAt, sync: sync}
	return opts
}
