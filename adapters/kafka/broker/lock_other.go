//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package broker

import (
	"os"
	"path/filepath"

	"github.com/cockroachdb/errors"
)

// lockDataDir only creates the lock file on platforms without flock: there
// two brokers on one data directory are not detected.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	return f, errors.Wrapf(err, "open kafka data directory lock %s", path)
}
