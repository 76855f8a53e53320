package eslog

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
)

// lockFileName is the file in the data directory that one Store holds locked
// while it is open.
const lockFileName = "LOCK"

// dirLock is a held lock on a data directory.
type dirLock struct{ f *os.File }

// lockDir takes the data directory's lock or fails with ErrLocked at once.
// It writes the holder's pid into the lock file for the error message of
// whoever comes second.
func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, errors.Wrapf(err, "open lock file %s", path)
	}
	held, err := tryLock(f)
	if err != nil {
		_ = f.Close()
		return nil, errors.Wrapf(err, "lock %s", path)
	}
	if !held {
		b, _ := os.ReadFile(path)
		_ = f.Close()
		holder := "another process"
		if pid := strings.TrimSpace(string(b)); pid != "" {
			holder += " (pid " + pid + ")"
		}
		return nil, errors.Wrapf(ErrLocked, "data directory %s is in use by %s; stop it or choose another directory", dir, holder)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

// release gives the lock up. The lock file stays: removing it would let a
// third process lock a new file while a second still waits on the old one.
func (l *dirLock) release() error {
	unlock(l.f)
	return errors.Wrap(l.f.Close(), "release data directory lock")
}
