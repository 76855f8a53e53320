package eslog_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// TestRealDiskFullThenFreed fills a real 1 MiB tmpfs, where one may be
// mounted (root with CAP_SYS_ADMIN), and skips elsewhere: appends fail with
// ErrNoSpace, and succeed again once a filler file is removed.
func TestRealDiskFullThenFreed(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	filler := filepath.Join(dir, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, 256<<10), 0o644))

	s, err := eslog.Open(eslog.Options{Dir: filepath.Join(dir, "log")})
	require.NoError(t, err)
	defer s.Close()
	big := ev(0)
	big.Data = make([]byte, 32<<10)
	var written int
	for ; written < 100; written++ {
		big.ID[0], big.ID[1] = byte(written), 1
		if _, err = s.Append(context.Background(), "s", eslog.Any, []eslog.ProposedEvent{big}); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, eslog.ErrNoSpace, "a 1 MiB disk fills up")
	require.Greater(t, written, 0)
	require.NoError(t, s.Health())

	require.NoError(t, os.Remove(filler))
	_, err = s.Append(context.Background(), "s", eslog.Any, []eslog.ProposedEvent{big})
	require.NoError(t, err, "writes succeed again once space is freed")
	page, err := s.ReadStream("s", eslog.Forwards, 0, false, 1000)
	require.NoError(t, err)
	assert.Len(t, page.Events, written+1)
	assert.Equal(t, uint64(1), s.Stats().Refused)
}
