//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package broker

import (
	"os"
	"path/filepath"
	"syscall"

	"github.com/cockroachdb/errors"
)

// lockDataDir takes an exclusive flock on a lock file in dir, without
// waiting. The lock goes with the process: a crash releases it.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, errors.Wrapf(err, "open kafka data directory lock %s", path)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errors.Wrapf(ErrDataDirLocked, "kafka data directory %s (lock file %s)", dir, path)
		}
		return nil, errors.Wrapf(err, "lock kafka data directory %s", dir)
	}
	return f, nil
}
