package broker

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/require"
)

// syncRecorder records what the rounds of a syncer did. The hooks run in
// the round's goroutine before wait returns, so reading after wait is safe.
type syncRecorder struct {
	synced map[string]int64
	dirs   []string
	listed int
}

func (r *syncRecorder) reset() { *r = syncRecorder{synced: map[string]int64{}} }

func newTestSyncer(t *testing.T) (*syncer, *syncRecorder, string) {
	t.Helper()
	dir := t.TempDir()
	s := newSyncer(dir, func(string) bool { return true }, slog.New(slog.DiscardHandler))
	rec := &syncRecorder{}
	rec.reset()
	s.hooks = syncHooks{
		synced:    func(path string, size int64) { rec.synced[path] = size },
		dirSynced: func(path string) { rec.dirs = append(rec.dirs, path) },
		listed:    func(string) { rec.listed++ },
	}
	t.Cleanup(s.shutdown)
	return s, rec, dir
}

// runRound runs a round over parts with a fresh record.
func runRound(t *testing.T, s *syncer, rec *syncRecorder, parts ...topicPartition) {
	t.Helper()
	rec.reset()
	require.NoError(t, s.wait(parts, false))
}

// appendFile appends n bytes to path, creating it if needed, and returns
// its size.
func appendFile(t *testing.T, path string, n int) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	_, err = f.Write(bytes.Repeat([]byte("x"), n))
	require.NoError(t, err)
	info, err := f.Stat()
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return info.Size()
}

// ageDir sets a directory's times an hour back, so that a listing of it is
// trusted and any later change to its entries shows.
func ageDir(t *testing.T, dir string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(dir, old, old))
}

// newPartition creates a partition directory with a segment and its index.
func newPartition(t *testing.T, dataDir string, p topicPartition) string {
	t.Helper()
	pdir := partitionDir(dataDir, p.topic, p.part)
	require.NoError(t, os.MkdirAll(pdir, 0o755))
	appendFile(t, filepath.Join(pdir, "0.dat"), 100)
	appendFile(t, filepath.Join(pdir, "0.idx"), 15)
	return pdir
}

func TestSyncerFindsRolledSegmentWithoutListingEveryRound(t *testing.T) {
	s, rec, dataDir := newTestSyncer(t)
	p := topicPartition{"orders", 0}
	pdir := newPartition(t, dataDir, p)
	dat, idx := filepath.Join(pdir, "0.dat"), filepath.Join(pdir, "0.idx")
	ageDir(t, pdir)

	runRound(t, s, rec, p)
	require.Equal(t, map[string]int64{dat: 100, idx: 15}, rec.synced)
	require.ElementsMatch(t, []string{pdir, filepath.Join(dataDir, "partitions"), dataDir}, rec.dirs)
	require.Equal(t, 1, rec.listed)

	// Appends are found by fstat alone.
	size := appendFile(t, dat, 50)
	runRound(t, s, rec, p)
	require.Equal(t, map[string]int64{dat: size}, rec.synced)
	require.Empty(t, rec.dirs)
	require.Zero(t, rec.listed, "the unchanged directory was listed again")

	runRound(t, s, rec, p)
	require.Empty(t, rec.synced)
	require.Zero(t, rec.listed)

	// A roll after the old segment grew in the same round: the new files
	// and their directory entries must be synced all the same.
	size = appendFile(t, dat, 20)
	rolled, rolledIdx := filepath.Join(pdir, "7.dat"), filepath.Join(pdir, "7.idx")
	rolledSize := appendFile(t, rolled, 30)
	appendFile(t, rolledIdx, 15)
	runRound(t, s, rec, p)
	require.Equal(t, map[string]int64{dat: size, rolled: rolledSize, rolledIdx: 15}, rec.synced)
	require.Equal(t, []string{pdir}, rec.dirs)
	require.Equal(t, 1, rec.listed)

	// The directory changed just now, within its time's granularity of
	// that listing: the next round does not trust it and lists again.
	runRound(t, s, rec, p)
	require.Empty(t, rec.synced)
	require.Equal(t, 1, rec.listed)
}

func TestSyncerReopensReplacedFile(t *testing.T) {
	s, rec, dataDir := newTestSyncer(t)
	p := topicPartition{"orders", 0}
	pdir := newPartition(t, dataDir, p)
	dat, idx := filepath.Join(pdir, "0.dat"), filepath.Join(pdir, "0.idx")
	ageDir(t, pdir)
	runRound(t, s, rec, p)
	stale := s.parts[p].files["0.dat"].f

	// Compaction removes the segment and writes it again under its name,
	// here shorter: syncing the stale fd would see its old size, 100, and
	// skip it.
	require.NoError(t, os.Remove(dat))
	size := appendFile(t, dat, 40)
	runRound(t, s, rec, p)
	require.Equal(t, map[string]int64{dat: size}, rec.synced)
	require.Equal(t, []string{pdir}, rec.dirs, "the new file's entry was not synced")
	_, err := stale.Stat()
	require.ErrorIs(t, err, os.ErrClosed, "the replaced file's fd was kept open")
	info, err := os.Stat(dat)
	require.NoError(t, err)
	require.True(t, os.SameFile(info, s.parts[p].files["0.dat"].info))

	// Replaced by a file of the same size, it is synced too.
	ageDir(t, pdir)
	runRound(t, s, rec, p) // a trusted listing again
	require.NoError(t, os.Remove(dat))
	appendFile(t, dat, 40)
	runRound(t, s, rec, p)
	require.Equal(t, map[string]int64{dat: size}, rec.synced)
	require.Equal(t, []string{pdir}, rec.dirs)

	// Retention removes the index: its fd is closed.
	open := s.open
	require.NoError(t, os.Remove(idx))
	runRound(t, s, rec, p)
	require.Empty(t, rec.synced)
	require.Equal(t, open-1, s.open)
	require.NotContains(t, s.parts[p].files, "0.idx")

	// The topic is deleted and created again: a new directory, whose entry
	// in partitions/ must be synced again.
	require.NoError(t, os.RemoveAll(pdir))
	newPartition(t, dataDir, p)
	runRound(t, s, rec, p)
	require.Equal(t, map[string]int64{dat: 100, idx: 15}, rec.synced)
	require.ElementsMatch(t, []string{pdir, filepath.Join(dataDir, "partitions"), dataDir}, rec.dirs)
}

func TestSyncerBoundsCachedFiles(t *testing.T) {
	s, rec, dataDir := newTestSyncer(t)
	s.maxOpen = 4
	parts := make([]topicPartition, 5)
	for i := range parts {
		parts[i] = topicPartition{"orders", int32(i)}
		newPartition(t, dataDir, parts[i])
	}
	openFds := func() int {
		n := 0
		for _, ps := range s.parts {
			for _, f := range ps.files {
				if f.f != nil {
					n++
				}
			}
		}
		require.Equal(t, n, s.open)
		return n
	}
	runRound(t, s, rec, parts...)
	require.Len(t, rec.synced, 10)
	require.LessOrEqual(t, openFds(), 4)
	for _, p := range parts[1:] {
		runRound(t, s, rec, p)
		require.LessOrEqual(t, openFds(), 4)
	}

	// An evicted partition is reopened; what was synced stays known, so
	// only the file that grew is synced, and no directory.
	first := parts[0]
	require.False(t, s.parts[first].listed, "the least recently used partition kept its fds")
	dat := filepath.Join(partitionDir(dataDir, first.topic, first.part), "0.dat")
	size := appendFile(t, dat, 10)
	runRound(t, s, rec, first)
	require.Equal(t, map[string]int64{dat: size}, rec.synced)
	require.Empty(t, rec.dirs)
	require.LessOrEqual(t, openFds(), 4)

	s.shutdown()
	require.Zero(t, openFds())
}

func TestSyncerFailedFsyncStaysSticky(t *testing.T) {
	s, rec, dataDir := newTestSyncer(t)
	p := topicPartition{"orders", 0}
	pdir := newPartition(t, dataDir, p)
	s.syncFile = func(*os.File) error { return errors.New("injected EIO") }
	err := s.wait([]topicPartition{p}, false)
	require.True(t, errors.Is(err, errNotDurable), "%v", err) // a mark: the standard errors.Is does not see it

	// A later fsync that succeeds would prove nothing.
	s.syncFile = fdatasync
	appendFile(t, filepath.Join(pdir, "0.dat"), 10)
	rec.reset()
	err = s.wait([]topicPartition{p}, false)
	require.True(t, errors.Is(err, errNotDurable), "%v", err)
	require.Empty(t, rec.synced)
}
