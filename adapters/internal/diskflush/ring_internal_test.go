//go:build linux

package diskflush

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// readThroughRing reads f into buf through r; tests use a read of an empty
// pipe as an operation that stays in flight until they write to the pipe.
// (f.Fd puts the pipe in blocking mode, so the read waits for data rather
// than answer EAGAIN.)
func readThroughRing(r *ring, f *os.File, buf []byte) (int32, error) {
	res, err := r.do(submission{opcode: opRead, fd: int32(f.Fd()), addr: uint64(uintptr(unsafe.Pointer(&buf[0]))),
		len: uint32(len(buf)), off: ^uint64(0)})
	runtime.KeepAlive(buf)
	return res, err
}

// TestRingParksTheWaitingGoroutine checks what the package is for: while an
// operation is in flight, the goroutine waiting for it is parked (it holds
// no P), not in a system call.
func TestRingParksTheWaitingGoroutine(t *testing.T) {
	r := shared()
	if r == nil {
		t.Skip("io_uring cannot be set up here; Fdatasync calls fdatasync directly")
	}
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pr.Close()
	defer pw.Close()

	buf := make([]byte, 5)
	type result struct {
		n   int32
		err error
	}
	got := make(chan result, 1)
	go func() {
		n, err := readThroughRing(r, pr, buf)
		got <- result{n, err}
	}()

	// Wait for the reader to be waiting on the ring, then look at its state.
	var state string
	deadline := time.Now().Add(10 * time.Second)
	for state == "" && time.Now().Before(deadline) {
		state = waitingState(t)
		runtime.Gosched()
	}
	require.NotEmpty(t, state, "the reader never reached ring.do")
	require.Equal(t, "chan receive", state, "the goroutine waiting for the ring must be parked on its channel")

	_, err = pw.Write([]byte("hello"))
	require.NoError(t, err)
	res := <-got
	require.NoError(t, res.err)
	require.Equal(t, int32(5), res.n)
	require.Equal(t, "hello", string(buf))
}

// waitingState is the state of the goroutine in readThroughRing once it
// waits in ring.await for its result, or "" while there is none such.
func waitingState(t *testing.T) string {
	t.Helper()
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "diskflush.readThroughRing") || !strings.Contains(g, "diskflush.(*ring).await") {
			continue
		}
		header, _, _ := strings.Cut(g, "\n")
		// "goroutine 7 [chan receive]:" or "goroutine 7 [chan receive, 2 minutes]:"
		_, state, ok := strings.Cut(header, "[")
		if !ok {
			return ""
		}
		state, _, _ = strings.Cut(state, "]")
		state, _, _ = strings.Cut(state, ",")
		if state == "runnable" || state == "running" {
			return "" // on its way to wait
		}
		return state
	}
	return ""
}

// TestRingAnswersAnUnknownOperationAndGoesOn: an operation the kernel does
// not know is answered with an error, and the ring goes on working.
func TestRingAnswersAnUnknownOperationAndGoesOn(t *testing.T) {
	r := shared()
	if r == nil {
		t.Skip("io_uring cannot be set up here")
	}
	// Opcode 255 is none the kernel knows: it takes the submission and
	// answers EINVAL in its completion.
	res, err := r.do(submission{opcode: 255, fd: -1})
	require.NoError(t, err)
	require.Less(t, res, int32(0))

	f, err := os.Create(t.TempDir() + "/after")
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, Fdatasync(f))
}

// TestFlushResult: the ring's flush is made again directly only when it did
// not run; an error of the flush itself is returned as it is, never retried.
func TestFlushResult(t *testing.T) {
	for _, tc := range []struct {
		name     string
		res      int32
		err      error
		retried  bool
		expected error
	}{
		{name: "flushed", res: 0},
		{name: "not taken by the kernel", err: errRingFull, retried: true},
		{name: "worker could not start", res: -int32(syscall.ECANCELED), retried: true},
		{name: "interrupted", res: -int32(syscall.EINTR), retried: true},
		{name: "I/O error", res: -int32(syscall.EIO), expected: syscall.EIO},
		{name: "no space", res: -int32(syscall.ENOSPC), expected: syscall.ENOSPC},
		{name: "refused by the file system", res: -int32(syscall.EACCES), expected: syscall.EACCES},
		{name: "cannot be flushed", res: -int32(syscall.EINVAL), expected: syscall.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			retried := false
			err := flushResult(tc.res, tc.err, func() error { retried = true; return nil })
			require.Equal(t, tc.retried, retried)
			if tc.expected == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.expected)
			}
		})
	}
}

// TestFullRingFlushesDirectly: with every place of the ring taken by an
// operation that does not end, a flush does not wait for one.
func TestFullRingFlushesDirectly(t *testing.T) {
	r, err := newRing(2)
	if err != nil {
		t.Skipf("io_uring cannot be set up here: %v", err)
	}
	places := len(r.done)
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pr.Close()
	defer pw.Close()
	reads := make(chan int32, places)
	for range places {
		go func() {
			n, _ := readThroughRing(r, pr, make([]byte, 1))
			reads <- n
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(r.slots) > 0 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	require.Zero(t, len(r.slots), "the reads never took every place")
	_, err = r.do(submission{opcode: opRead})
	require.ErrorIs(t, err, errRingFull)

	f, err := os.Create(t.TempDir() + "/file")
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, r.fdatasync(int32(f.Fd())))

	_, err = pw.Write(make([]byte, places))
	require.NoError(t, err)
	for range places {
		require.Equal(t, int32(1), <-reads)
	}
}

// TestDisableEnvTurnsTheRingOff runs this test binary again with
// SAGA_FLUSH=fdatasync: Fdatasync then never sets up a ring.
func TestDisableEnvTurnsTheRingOff(t *testing.T) {
	if os.Getenv("DISKFLUSH_CHILD") == "1" {
		f, err := os.Create(os.Getenv("DISKFLUSH_FILE"))
		require.NoError(t, err)
		require.NoError(t, Fdatasync(f))
		require.NoError(t, f.Close())
		fmt.Printf("method=%s why=%s\n", Method(), Why())
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDisableEnvTurnsTheRingOff$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DISKFLUSH_CHILD=1", "DISKFLUSH_FILE="+t.TempDir()+"/file", DisableEnv+"=fdatasync")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "method=fdatasync why=SAGA_FLUSH=fdatasync")
}

// TestRingWithoutItsEventfdStillAnswers: if the reaper can no longer read
// the ring's eventfd, it waits for completions in io_uring_enter instead.
// The operation in flight still gets its answer, and new flushes are made
// directly. (The test's ring and its reaper, blocked in io_uring_enter, stay
// for the life of the test binary, as a ring does in a process.)
func TestRingWithoutItsEventfdStillAnswers(t *testing.T) {
	r, err := newRing(4)
	if err != nil {
		t.Skipf("io_uring cannot be set up here: %v", err)
	}
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pr.Close()
	defer pw.Close()
	read := make(chan int32, 1)
	go func() {
		n, _ := readThroughRing(r, pr, make([]byte, 1))
		read <- n
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(r.slots) == len(r.done) && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	require.Less(t, len(r.slots), len(r.done), "the read never took a place")

	// The reaper's read of the eventfd now fails.
	require.NoError(t, r.event.Close())
	for !r.dead.Load() && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	require.True(t, r.dead.Load(), "the reaper did not notice its eventfd was gone")

	f, err := os.Create(t.TempDir() + "/file")
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteString("kept")
	require.NoError(t, err)
	require.NoError(t, r.fdatasync(int32(f.Fd())))

	_, err = pw.Write([]byte{1})
	require.NoError(t, err)
	select {
	case n := <-read:
		require.Equal(t, int32(1), n)
	case <-time.After(10 * time.Second):
		t.Fatal("the read in flight never got its answer")
	}
}
