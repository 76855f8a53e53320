//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package broker

import (
	"os"
	"syscall"
)

// OpenFiles reports how many file descriptors the process has open (-1
// where the system does not say: only Linux's /proc/self/fd is read) and
// its limit (RLIMIT_NOFILE; 0 when unknown).
func OpenFiles() (open int, limit uint64) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
		limit = uint64(rl.Cur) // int64 on FreeBSD and DragonFly, never negative there
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1, limit
	}
	return len(entries) - 1, limit // less the fd that listed them
}
