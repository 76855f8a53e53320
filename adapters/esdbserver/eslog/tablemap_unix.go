//go:build unix

package eslog

import (
	"os"
	"syscall"

	"github.com/cockroachdb/errors"
)

// mapRegion maps n bytes of f from off, read-only: the table's fence and
// filter then live in the page cache, outside Go's heap and its memory
// limit, however long the history. The returned function unmaps them.
func mapRegion(f *os.File, off int64, n int) ([]byte, func() error, error) {
	page := int64(os.Getpagesize())
	start := off - off%page
	mem, err := syscall.Mmap(int(f.Fd()), start, int(off-start)+n, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, errors.Wrap(err, "map the fence and filter")
	}
	return mem[off-start:], func() error { return syscall.Munmap(mem) }, nil
}
