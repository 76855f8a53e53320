//go:build !unix

package eslog

import "os"

// mapRegion reads n bytes of f from off into memory, where there is no
// mmap.
func mapRegion(f *os.File, off int64, n int) ([]byte, func() error, error) {
	mem := make([]byte, n)
	if _, err := f.ReadAt(mem, off); err != nil {
		return nil, nil, err
	}
	return mem, func() error { return nil }, nil
}
