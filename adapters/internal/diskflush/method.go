package diskflush

// The ways Fdatasync flushes, as Method names them.
const (
	// MethodIOURing is an fdatasync run by the kernel for an io_uring, the
	// calling goroutine parked meanwhile.
	MethodIOURing = "io_uring"
	// MethodFdatasync is the fdatasync system call, made by the calling
	// goroutine.
	MethodFdatasync = "fdatasync"
	// MethodSync is File.Sync, where there is no fdatasync.
	MethodSync = "sync"
)
