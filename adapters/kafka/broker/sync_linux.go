package broker

import (
	"os"
	"syscall"
)

// fdatasync flushes the file's data and the metadata needed to read it back,
// its size included, but not its times.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
