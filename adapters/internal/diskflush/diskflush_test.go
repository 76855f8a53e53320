//go:build linux

package diskflush_test

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/internal/diskflush"
)

func TestFdatasyncFlushesFilesFromManyGoroutines(t *testing.T) {
	dir := t.TempDir()
	// More flushes at once than the ring has places: the rest are made
	// directly.
	const files, rounds = 100, 5
	var wg sync.WaitGroup
	errs := make(chan error, files*rounds)
	for i := range files {
		wg.Go(func() {
			f, err := os.Create(filepath.Join(dir, "f"+string(rune('a'+i%26))+string(rune('a'+i/26))))
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			for range rounds {
				if _, err := f.Write(make([]byte, 4096)); err != nil {
					errs <- err
					return
				}
				errs <- diskflush.Fdatasync(f)
			}
		})
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		require.NoError(t, err)
		n++
	}
	require.Equal(t, files*rounds, n)
	t.Logf("flushed through %s", diskflush.Method())
}

func TestFdatasyncReportsTheSystemsError(t *testing.T) {
	// A pipe cannot be flushed: fdatasync(2) answers EINVAL, and so must
	// the ring.
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	require.ErrorIs(t, diskflush.Fdatasync(w), syscall.EINVAL)

	f, err := os.Create(filepath.Join(t.TempDir(), "closed"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.ErrorIs(t, diskflush.Fdatasync(f), os.ErrClosed)
}
