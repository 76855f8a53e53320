package eslog

import (
	"os"
	"syscall"
)

// fdatasync flushes the file's data and the metadata needed to read it back,
// which is all an append-only log needs.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
