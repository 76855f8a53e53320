// Package diskflush flushes a file's data to its disk (fdatasync) without
// keeping a CPU of the Go scheduler idle while the disk works.
//
// A goroutine blocked in a system call keeps its P (the scheduler's right
// to run Go code) until sysmon hands the P to another thread. Sysmon does
// so only when it finds the same call still running at two of its checks,
// and it spaces its checks out to 10 ms while it finds nothing to hand off.
// An fdatasync of a fraction of a millisecond, a few hundred times a second,
// is therefore never handed off: with two Ps, the event store's and the
// embedded broker's flushes kept one P from running anything about a sixth
// of the time, with hundreds of goroutines waiting to run.
//
// On Linux, Fdatasync submits the flush to an io_uring (IORING_OP_FSYNC with
// IORING_FSYNC_DATASYNC: the kernel's fdatasync, run by one of its own
// worker threads) and parks the calling goroutine until the ring's eventfd
// says it is done, so the P runs other goroutines meanwhile. The ring is
// used only where the kernel says, when it is set up, that it never drops a
// completion and knows the flush (5.6 and later). Elsewhere (an older
// kernel, a seccomp profile that refuses io_uring, as Docker's default does,
// kernel.io_uring_disabled, gVisor), or when SAGA_FLUSH=fdatasync is set, it
// calls fdatasync directly, as before; on other systems it calls File.Sync.
// Either way it returns only once the flush is done, and an error of the
// flush is returned, never retried.
package diskflush
