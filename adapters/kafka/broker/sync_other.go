//go:build !linux

package broker

import "os"

// fdatasync is fsync where the system has no fdatasync to call.
func fdatasync(f *os.File) error { return f.Sync() }
