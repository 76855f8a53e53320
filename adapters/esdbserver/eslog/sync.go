package eslog

import (
	"os"

	"github.com/sagaengine/saga/adapters/internal/diskflush"
)

// fdatasync flushes the file's data and the metadata needed to read it back,
// which is all an append-only log needs. The writer goroutine is parked
// while the disk works (diskflush), so the CPU it ran on runs the appenders.
func fdatasync(f *os.File) error { return diskflush.Fdatasync(f) }
