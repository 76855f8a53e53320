package eslog_test

import (
	"context"
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// faultyDisk makes writes fail with ENOSPC after writing half their bytes,
// or syncs fail with EIO, while its switches are on.
type faultyDisk struct {
	full, syncFails atomic.Bool
}

func (d *faultyDisk) open(t *testing.T, dir string) *eslog.Store {
	t.Helper()
	opts := eslog.WithFileIO(eslog.Options{Dir: dir, SegmentSize: 1 << 20},
		func(f *os.File, b []byte, off int64) (int, error) {
			if d.full.Load() {
				n, _ := f.WriteAt(b[:len(b)/2], off)
				return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
			}
			return f.WriteAt(b, off)
		},
		func(f *os.File) error {
			if d.syncFails.Load() {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: syscall.EIO}
			}
			return f.Sync()
		})
	s, err := eslog.Open(opts)
	require.NoError(t, err)
	return s
}

func appendOne(s *eslog.Store, id byte) (eslog.WriteResult, error) {
	return s.Append(context.Background(), "s", eslog.Any, []eslog.ProposedEvent{ev(id)})
}

func logSize(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	for _, p := range segments(t, dir) {
		info, err := os.Stat(p)
		require.NoError(t, err)
		total += info.Size()
	}
	return total
}

// TestDiskFullThenFreed fails a write with ENOSPC after half of it reached
// the file: the append fails with ErrNoSpace, the partial bytes are cut, the
// store stays healthy, and the next append succeeds without a restart.
func TestDiskFullThenFreed(t *testing.T) {
	dir := t.TempDir()
	disk := &faultyDisk{}
	s := disk.open(t, dir)
	for i := 1; i <= 3; i++ {
		_, err := appendOne(s, byte(i))
		require.NoError(t, err)
	}
	size := logSize(t, dir)

	disk.full.Store(true)
	_, err := appendOne(s, 4)
	require.ErrorIs(t, err, eslog.ErrNoSpace)
	t.Log(err)
	assert.Contains(t, err.Error(), "no space left on device")
	assert.Equal(t, size, logSize(t, dir), "the partial write is cut")
	assert.NoError(t, s.Health(), "a full disk does not stop the store")
	_, err = appendOne(s, 5)
	require.ErrorIs(t, err, eslog.ErrNoSpace)
	assert.Equal(t, uint64(2), s.Stats().Refused)

	disk.full.Store(false)
	res, err := appendOne(s, 6)
	require.NoError(t, err, "writes succeed again once there is space")
	assert.Equal(t, int64(3), res.Revision, "the failed appends took no revision")
	require.NoError(t, s.Close())

	s = open(t, dir)
	defer s.Close()
	page, err := s.ReadStream("s", eslog.Forwards, 0, false, 100)
	require.NoError(t, err)
	ids := []byte{}
	for _, e := range page.Events {
		ids = append(ids, e.ID[0])
	}
	assert.Equal(t, []byte{1, 2, 3, 6}, ids)
}

// TestFailedFsyncStopsWritesUntilRestart fails an fsync: that append and
// every later one fail with ErrWriteFailed saying to restart, Health reports
// it, reads go on, and a reopened store writes again.
func TestFailedFsyncStopsWritesUntilRestart(t *testing.T) {
	dir := t.TempDir()
	disk := &faultyDisk{}
	s := disk.open(t, dir)
	_, err := appendOne(s, 1)
	require.NoError(t, err)
	require.NoError(t, s.Health())

	disk.syncFails.Store(true)
	_, err = appendOne(s, 2)
	require.ErrorIs(t, err, eslog.ErrWriteFailed)
	assert.Contains(t, err.Error(), "restart to recover")
	disk.syncFails.Store(false)

	_, err = appendOne(s, 3)
	require.ErrorIs(t, err, eslog.ErrWriteFailed, "a failed fsync is not retried")
	t.Log(err)
	assert.Contains(t, err.Error(), "restart to recover")
	health := s.Health()
	require.ErrorIs(t, health, eslog.ErrWriteFailed)
	assert.Contains(t, health.Error(), "input/output error")
	assert.Equal(t, uint64(2), s.Stats().Refused)
	page, err := s.ReadStream("s", eslog.Forwards, 0, false, 100)
	require.NoError(t, err, "reads go on")
	assert.Len(t, page.Events, 1)
	require.NoError(t, s.Close())

	s = open(t, dir)
	defer s.Close()
	require.NoError(t, s.Health())
	_, err = appendOne(s, 4)
	require.NoError(t, err, "a restart recovers")
}
