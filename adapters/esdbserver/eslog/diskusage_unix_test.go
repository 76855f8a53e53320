//go:build unix

package eslog_test

import (
	"os"
	"syscall"
)

// allocated is the disk space a file takes, which is less than its size
// where it has holes.
func allocated(info os.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return info.Size()
}
