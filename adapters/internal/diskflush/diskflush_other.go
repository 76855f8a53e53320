//go:build !linux

package diskflush

import "os"

// Fdatasync flushes f's data and the metadata needed to read it back; here,
// where the system has no fdatasync to call, it is File.Sync.
func Fdatasync(f *os.File) error { return f.Sync() }

// Method says how Fdatasync flushes: MethodSync here.
func Method() string { return MethodSync }

// Why says why Fdatasync does not use an io_uring: there is none here.
func Why() string { return "io_uring is Linux's" }
