package broker

import (
	"os"

	"github.com/sagaengine/saga/adapters/internal/diskflush"
)

// fdatasync flushes the file's data and the metadata needed to read it back,
// its size included, but not its times. The calling goroutine is parked
// while the disk works (diskflush), so the CPU it ran on runs others.
func fdatasync(f *os.File) error { return diskflush.Fdatasync(f) }
