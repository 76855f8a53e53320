//go:build linux

package diskflush

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/cockroachdb/errors"
	"golang.org/x/sys/unix"
)

// Fdatasync flushes f's data and the metadata needed to read it back (its
// size, not its times), as fdatasync(2) does, and returns once the disk has
// them. The calling goroutine is parked meanwhile where an io_uring could be
// set up (Method says whether it could). f stays open until the flush is
// done: Close waits for it.
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
		flushErr = ignoringEINTR(func() error { return syscall.Fdatasync(int(fd)) })
	}); cerr != nil {
		// Control fails only when f is closed or closing.
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: os.ErrClosed}
	}
	return flushErr
}

// Method says how Fdatasync flushes: MethodIOURing, or MethodFdatasync
// where no io_uring could be set up.
func Method() string {
	if shared() != nil {
		return MethodIOURing
	}
	return MethodFdatasync
}

var (
	sharedOnce sync.Once
	sharedRing *ring
)

// shared is the process's ring, set up at the first call; nil when io_uring
// is not available.
func shared() *ring {
	sharedOnce.Do(func() {
		r, err := newRing(ringEntries)
		if err == nil {
			sharedRing = r
		}
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

// ringEntries bounds the flushes in flight at once; more wait for a place.
const ringEntries = 64

// The kernel's io_uring interface (include/uapi/linux/io_uring.h).
const (
	opFsync           = 3 // IORING_OP_FSYNC
	opRead            = 22
	fsyncDatasync     = 1 // IORING_FSYNC_DATASYNC
	offSQRing         = 0
	offCQRing         = 0x8000000
	offSQEs           = 0x10000000
	featSingleMmap    = 1 << 0
	registerEventfd   = 4
	submissionSize    = 64
	completionSize    = 16
	enterGetEvents    = 1 << 0
	maxSubmitAttempts = 1000
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
	// flight, and there are no more than the completion queue holds.
	slots chan uint32
	// done receives each slot's result (a byte count, or -errno).
	done []chan int32
}

// newRing sets up an io_uring of entries submissions and its eventfd, and
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

	inFlight := min(p.sqEntries, p.cqEntries)
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

// fdatasync flushes fd through the ring.
func (r *ring) fdatasync(fd int32) error {
	res, err := r.do(submission{opcode: opFsync, fd: fd, opFlags: fsyncDatasync})
	if err != nil {
		// The kernel refused the submission itself (it took none):
		// flush as before.
		return ignoringEINTR(func() error { return syscall.Fdatasync(int(fd)) })
	}
	if res < 0 {
		return syscall.Errno(-res)
	}
	return nil
}

// do submits s and waits for its result: a count, or -errno. An error means
// the kernel did not take the submission.
func (r *ring) do(s submission) (int32, error) {
	slot := <-r.slots
	s.userData = uint64(slot)
	if err := r.submit(&s); err != nil {
		r.slots <- slot
		return 0, err
	}
	res := <-r.done[slot]
	r.slots <- slot
	return res, nil
}

// submit writes s into the submission queue and hands it to the kernel.
func (r *ring) submit(s *submission) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	tail := atomic.LoadUint32(r.sqTail)
	index := tail & *r.sqMask
	*(*submission)(unsafe.Add(unsafe.Pointer(&r.sqeMem[0]), uintptr(index)*submissionSize)) = *s
	*(*uint32)(unsafe.Add(r.sqArray, uintptr(index)*4)) = index
	atomic.StoreUint32(r.sqTail, tail+1)
	for range maxSubmitAttempts {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 1, 0, 0, 0, 0)
		if errno == 0 && n == 1 {
			return nil
		}
		if errno != syscall.EINTR && errno != syscall.EAGAIN {
			if atomic.LoadUint32(r.sqHead) == tail {
				// Not taken: take it back, so the queue stays as the
				// kernel last saw it.
				atomic.StoreUint32(r.sqTail, tail)
				if errno == 0 {
					return errors.New("io_uring_enter took no submission")
				}
				return errors.Wrap(errno, "io_uring_enter")
			}
			return nil
		}
	}
	atomic.StoreUint32(r.sqTail, tail)
	return errors.New("io_uring_enter kept answering EINTR or EAGAIN")
}

// reap hands every completion to its waiter, each time the eventfd says
// there are new ones. It runs for the life of the process.
func (r *ring) reap() {
	var counter [8]byte
	for {
		if _, err := r.event.Read(counter[:]); err != nil && !errors.Is(err, syscall.EAGAIN) {
			// An eventfd read fails only if the descriptor is gone; poll
			// the queue directly from now on rather than lose answers.
			r.reapBlocking()
			return
		}
		r.drain()
	}
}

// drain hands out every completion in the queue.
func (r *ring) drain() {
	head := atomic.LoadUint32(r.cqHead)
	for {
		tail := atomic.LoadUint32(r.cqTail)
		if head == tail {
			return
		}
		for ; head != tail; head++ {
			c := (*completion)(unsafe.Add(r.cqes, uintptr(head&*r.cqMask)*completionSize))
			r.done[c.userData] <- c.res
		}
		atomic.StoreUint32(r.cqHead, head)
	}
}

// reapBlocking waits for completions in io_uring_enter instead of on the
// eventfd.
func (r *ring) reapBlocking() {
	for {
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, 1, enterGetEvents, 0, 0)
		if errno != 0 && errno != syscall.EINTR {
			return
		}
		r.drain()
	}
}
