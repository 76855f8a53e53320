//go:build !linux

package eslog

import (
	"os"
	"path/filepath"
	"sync"
)

// locked holds the lock files open in this process. Without flock the lock
// only keeps a second Store of this process out of a directory; another
// process is not stopped.
var locked sync.Map

func tryLock(f *os.File) (bool, error) {
	path, err := filepath.Abs(f.Name())
	if err != nil {
		return false, err
	}
	_, taken := locked.LoadOrStore(path, f)
	return !taken, nil
}

func unlock(f *os.File) {
	if path, err := filepath.Abs(f.Name()); err == nil {
		locked.CompareAndDelete(path, f)
	}
}
