//go:build linux

package diskflush

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cockroachdb/errors"
	"golang.org/x/sys/unix"
)

// Fdatasync flushes f's data and the metadata needed to read it back (its
// size, not its times), as fdatasync(2) does, and returns once the disk has
// them. The calling goroutine is parked meanwhile where an io_uring could be
// set up (Method says whether it could). f's descriptor stays valid until
// the flush is done, even if another goroutine closes f meanwhile; that
// Close returns at once and the descriptor is closed after the flush, the
// close's own error unreported.
func Fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	r := shared()
	var flushErr error
	if cerr := rc.Control(func(fd uintptr) {
		if r != nil {
			flushErr = r.fdatasync(int32(fd))
			return
		}
		flushErr = direct(int32(fd))
	}); cerr != nil {
		// Control fails only when f is closed or closing.
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: os.ErrClosed}
	}
	return flushErr
}

// direct is fdatasync(2), made by the calling goroutine.
func direct(fd int32) error {
	return ignoringEINTR(func() error { return syscall.Fdatasync(int(fd)) })
}

// Method says how Fdatasync flushes: MethodIOURing, or MethodFdatasync
// where no io_uring could be set up or its reaper stopped (Why says why).
func Method() string {
	if r := shared(); r != nil && !r.dead.Load() {
		return MethodIOURing
	}
	return MethodFdatasync
}

// Why says why Fdatasync does not use an io_uring, or "" when it does.
func Why() string {
	if r := shared(); r == nil {
		return sharedWhy
	} else if r.dead.Load() {
		return "its completions could no longer be read"
	}
	return ""
}

// DisableEnv names the environment variable that, set to "fdatasync",
// makes Fdatasync call fdatasync(2) directly and never set up an io_uring:
// for a seccomp profile that kills a process making a system call it does
// not allow, or a checkpointing tool (CRIU) that cannot save a ring.
const DisableEnv = "SAGA_FLUSH"

var (
	sharedOnce sync.Once
	sharedRing *ring
	sharedWhy  string
)

// shared is the process's ring, set up at the first call; nil when io_uring
// is not available or turned off.
func shared() *ring {
	sharedOnce.Do(func() {
		if os.Getenv(DisableEnv) == MethodFdatasync {
			sharedWhy = DisableEnv + "=" + MethodFdatasync
			return
		}
		r, err := newRing(ringEntries)
		if err != nil {
			sharedWhy = err.Error()
			return
		}
		sharedRing = r
	})
	return sharedRing
}

// ignoringEINTR retries a call interrupted by a signal, as package os does.
func ignoringEINTR(call func() error) error {
	for {
		if err := call(); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// ringEntries is the ring's size: the flushes in flight through it at
// once. A flush that finds it full is made directly rather than wait: a
// slow file (the broker flushes many at once) never holds up the others.
const ringEntries = 64

// The kernel's io_uring interface (include/uapi/linux/io_uring.h).
const (
	opFsync         = 3  // IORING_OP_FSYNC
	opRead          = 22 // IORING_OP_READ, for tests
	fsyncDatasync   = 1  // IORING_FSYNC_DATASYNC
	offSQRing       = 0
	offCQRing       = 0x8000000
	offSQEs         = 0x10000000
	featSingleMmap  = 1 << 0
	featNoDrop      = 1 << 1 // completions are never dropped (5.5)
	registerEventfd = 4
	registerProbe   = 8 // which operations the ring knows (5.6)
	opSupported     = 1 << 0
	submissionSize  = 64
	completionSize  = 16
	enterGetEvents  = 1 << 0
	// submitAttempts bounds io_uring_enter calls that answer EINTR or
	// EAGAIN for one submission before it is taken back.
	submitAttempts = 8
)

type sqRingOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqRingOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type ringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqRingOffsets
	cqOff                                                                  cqRingOffsets
}

// submission is struct io_uring_sqe, as far as a flush or a read uses it.
type submission struct {
	opcode   uint8
	flags    uint8
	ioprio   uint16
	fd       int32
	off      uint64
	addr     uint64
	len      uint32
	opFlags  uint32
	userData uint64
	_        [24]byte
}

// completion is struct io_uring_cqe.
type completion struct {
	userData uint64
	res      int32
	flags    uint32
}

// probe is struct io_uring_probe with room for every operation number.
type probe struct {
	lastOp uint8
	opsLen uint8
	_      uint16
	_      [3]uint32
	ops    [256]struct {
		op    uint8
		_     uint8
		flags uint16
		_     uint32
	}
}

// ring is one io_uring, its completions reaped by a goroutine of its own
// that waits on the ring's eventfd through the runtime's network poller.
type ring struct {
	fd     int
	sqMem  []byte
	cqMem  []byte
	sqeMem []byte
	event  *os.File

	sqHead, sqTail, sqMask *uint32
	sqArray                unsafe.Pointer
	cqHead, cqTail, cqMask *uint32
	cqes                   unsafe.Pointer

	// mu orders submissions: each is written and handed to the kernel
	// before the next.
	mu sync.Mutex
	// slots holds the free user_data values; taking one is a place in
	// flight. There are as many as submission entries, half the
	// completion queue, and the reaper frees an entry before it wakes the
	// waiter, so completions never outnumber the queue.
	slots chan uint32
	// done receives each slot's result (a byte count, or -errno).
	done []chan int32
	// dead is set if completions can no longer be read; flushes are then
	// made directly.
	dead atomic.Bool
}

// newRing sets up an io_uring of entries submissions and its eventfd,
// checks the kernel can flush through it without dropping completions, and
// starts reaping.
func newRing(entries uint32) (_ *ring, err error) {
	var p ringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, errors.Wrap(errno, "io_uring_setup")
	}
	r := &ring{fd: int(fd)}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if p.features&featNoDrop == 0 {
		return nil, errors.New("io_uring: this kernel may drop completions (no IORING_FEAT_NODROP, before 5.5)")
	}
	var pr probe
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, fd, registerProbe, uintptr(unsafe.Pointer(&pr)), uintptr(len(pr.ops)), 0, 0); errno != 0 {
		return nil, errors.Wrap(errno, "io_uring_register probe")
	}
	if pr.lastOp < opFsync || pr.ops[opFsync].flags&opSupported == 0 {
		return nil, errors.New("io_uring: the kernel's ring cannot flush (no IORING_OP_FSYNC)")
	}
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*completionSize)
	if p.features&featSingleMmap != 0 {
		sqSize = max(sqSize, cqSize)
	}
	if r.sqMem, err = unix.Mmap(r.fd, offSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, errors.Wrap(err, "mmap the submission ring")
	}
	cq := r.sqMem
	if p.features&featSingleMmap == 0 {
		if r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
			return nil, errors.Wrap(err, "mmap the completion ring")
		}
		cq = r.cqMem
	}
	if r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*submissionSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return nil, errors.Wrap(err, "mmap the submissions")
	}
	at := func(mem []byte, off uint32) unsafe.Pointer { return unsafe.Pointer(&mem[off]) }
	r.sqHead = (*uint32)(at(r.sqMem, p.sqOff.head))
	r.sqTail = (*uint32)(at(r.sqMem, p.sqOff.tail))
	r.sqMask = (*uint32)(at(r.sqMem, p.sqOff.ringMask))
	r.sqArray = at(r.sqMem, p.sqOff.array)
	r.cqHead = (*uint32)(at(cq, p.cqOff.head))
	r.cqTail = (*uint32)(at(cq, p.cqOff.tail))
	r.cqMask = (*uint32)(at(cq, p.cqOff.ringMask))
	r.cqes = at(cq, p.cqOff.cqes)

	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, errors.Wrap(err, "eventfd")
	}
	// A non-blocking descriptor makes a File the runtime's poller waits on.
	r.event = os.NewFile(uintptr(efd), "io_uring eventfd")
	event := int32(efd)
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerEventfd, uintptr(unsafe.Pointer(&event)), 1, 0, 0); errno != 0 {
		return nil, errors.Wrap(errno, "io_uring_register eventfd")
	}

	inFlight := min(p.sqEntries, p.cqEntries/2)
	r.slots = make(chan uint32, inFlight)
	r.done = make([]chan int32, inFlight)
	for i := range inFlight {
		r.slots <- i
		r.done[i] = make(chan int32, 1)
	}
	go r.reap()
	return r, nil
}

// close releases what newRing set up; only for a ring that failed to start.
func (r *ring) close() {
	for _, mem := range [][]byte{r.sqeMem, r.cqMem, r.sqMem} {
		if mem != nil {
			_ = unix.Munmap(mem)
		}
	}
	if r.event != nil {
		_ = r.event.Close()
	}
	_ = unix.Close(r.fd)
}

// fdatasync flushes fd through the ring, or directly where the ring cannot
// take it.
func (r *ring) fdatasync(fd int32) error {
	if r.dead.Load() {
		return direct(fd)
	}
	res, err := r.do(submission{opcode: opFsync, fd: fd, opFlags: fsyncDatasync})
	return flushResult(res, err, func() error { return direct(fd) })
}

// flushResult is the outcome of a flush the ring answered res, or refused
// with err. The flush is made directly only when the ring's did not run:
// the kernel did not take it, or answered ECANCELED (its worker could not
// start) or EINTR (interrupted, as fdatasync(2) is retried). Any other
// error is the flush's and is never retried: a second flush after a failed
// one may succeed without the data the first one lost.
func flushResult(res int32, err error, direct func() error) error {
	switch {
	case err != nil:
		return direct()
	case res >= 0:
		return nil
	case syscall.Errno(-res) == syscall.ECANCELED || syscall.Errno(-res) == syscall.EINTR:
		return direct()
	default:
		return syscall.Errno(-res)
	}
}

// errRingFull is do's answer when every place in the ring is taken.
var errRingFull = errors.New("io_uring: every place is taken")

// do submits s and waits for its result: a count, or -errno. An error means
// the kernel did not take the submission, or there was no place for it.
func (r *ring) do(s submission) (int32, error) {
	var slot uint32
	select {
	case slot = <-r.slots:
	default:
		return 0, errRingFull
	}
	s.userData = uint64(slot)
	if err := r.submit(&s); err != nil {
		r.slots <- slot
		return 0, err
	}
	res := r.await(slot)
	r.slots <- slot
	return res, nil
}

// await parks until the reaper hands over slot's result.
func (r *ring) await(slot uint32) int32 { return <-r.done[slot] }

// submit writes s into the submission queue and hands it to the kernel. On
// an error the kernel did not take it, and the queue is as it was.
func (r *ring) submit(s *submission) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	tail := atomic.LoadUint32(r.sqTail)
	index := tail & *r.sqMask
	*(*submission)(unsafe.Add(unsafe.Pointer(&r.sqeMem[0]), uintptr(index)*submissionSize)) = *s
	*(*uint32)(unsafe.Add(r.sqArray, uintptr(index)*4)) = index
	atomic.StoreUint32(r.sqTail, tail+1)
	var errno syscall.Errno
	for range submitAttempts {
		var n uintptr
		n, _, errno = unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 1, 0, 0, 0, 0)
		if errno == 0 && n == 1 {
			return nil
		}
		if errno != syscall.EINTR && errno != syscall.EAGAIN {
			break
		}
	}
	if atomic.LoadUint32(r.sqHead) != tail {
		return nil // taken after all
	}
	// Not taken: take it back, so the queue stays as the kernel saw it.
	atomic.StoreUint32(r.sqTail, tail)
	if errno == 0 {
		return errors.New("io_uring_enter took no submission")
	}
	return errors.Wrap(errno, "io_uring_enter")
}

// reap hands every completion to its waiter, each time the eventfd says
// there are new ones. It runs for the life of the process.
func (r *ring) reap() {
	var counter [8]byte
	for {
		if _, err := r.event.Read(counter[:]); err != nil {
			// An eventfd read fails only if the descriptor is gone: wait
			// in io_uring_enter instead, rather than lose answers.
			r.reapBlocking()
		}
		r.drain()
	}
}

// drain hands out every completion in the queue, each entry freed before
// its waiter wakes.
func (r *ring) drain() {
	head := atomic.LoadUint32(r.cqHead)
	for head != atomic.LoadUint32(r.cqTail) {
		c := *(*completion)(unsafe.Add(r.cqes, uintptr(head&*r.cqMask)*completionSize))
		head++
		atomic.StoreUint32(r.cqHead, head)
		r.done[c.userData] <- c.res
	}
}

// reapBlocking waits for completions in io_uring_enter instead of on the
// eventfd, for the life of the process. New flushes are made directly
// meanwhile; those in flight get their answers. A lasting error is retried
// every 10 ms, not in a busy loop.
func (r *ring) reapBlocking() {
	r.dead.Store(true)
	for {
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, 1, enterGetEvents, 0, 0)
		if errno != 0 && errno != syscall.EINTR {
			time.Sleep(10 * time.Millisecond)
		}
		r.drain()
	}
}
