//go:build linux

package diskflush

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// readThroughRing reads f into buf through r; tests use a read of an empty
// pipe as an operation that stays in flight until they write to the pipe.
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

// waitingState is the state of the goroutine waiting in readThroughRing, or
// "" when there is none yet.
func waitingState(t *testing.T) string {
	t.Helper()
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "diskflush.readThroughRing") || !strings.Contains(g, "diskflush.(*ring).do") {
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
