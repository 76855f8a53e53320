package eslog_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// writeOneSegment appends n one-event writes to a fresh store with a single
// segment and returns the segment's path and size.
func writeOneSegment(t *testing.T, dir string, n int) (string, int64) {
	t.Helper()
	s, err := eslog.Open(eslog.ClosingAsCrash(eslog.Options{Dir: dir}))
	require.NoError(t, err)
	for i := 1; i <= n; i++ {
		_, err := s.Append(context.Background(), "s", eslog.Any, []eslog.ProposedEvent{ev(byte(i))})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	segs := segments(t, dir)
	require.Len(t, segs, 1)
	info, err := os.Stat(segs[0])
	require.NoError(t, err)
	return segs[0], info.Size()
}

func readAllOf(t *testing.T, dir string) int {
	t.Helper()
	s, err := eslog.Open(eslog.Options{Dir: dir})
	require.NoError(t, err)
	defer s.Close()
	page, err := s.ReadStream("s", eslog.Forwards, 0, false, 1000)
	require.NoError(t, err)
	return len(page.Events)
}

func kept(t *testing.T, dir string) []string {
	names, err := filepath.Glob(filepath.Join(dir, "*.torn-*"))
	require.NoError(t, err)
	return names
}

var badAt = regexp.MustCompile(`bad frame at byte (\d+)`)

// TestCorruptByteInNewestSegmentRefusesToOpen flips one byte in the middle
// of the newest segment, in a body, a checksum or a length: the open fails
// with ErrCorrupt naming the file and the frame's offset, and cuts nothing.
func TestCorruptByteInNewestSegmentRefusesToOpen(t *testing.T) {
	const n = 20
	for name, flip := range map[string]func(frame, size int64) (int64, byte){
		"body":                 func(frame, size int64) (int64, byte) { return frame + size/2, 0x01 },
		"checksum":             func(frame, _ int64) (int64, byte) { return frame + 5, 0x80 },
		"length made huge":     func(frame, _ int64) (int64, byte) { return frame + 3, 0x3f },
		"length made shorter":  func(frame, _ int64) (int64, byte) { return frame, 0x04 },
		"length made zero":     func(frame, _ int64) (int64, byte) { return frame, 0xff },
		"kind byte of a frame": func(frame, _ int64) (int64, byte) { return frame + 8, 0x07 },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path, size := writeOneSegment(t, dir, n)
			frameSize := size / n
			require.Equal(t, size, frameSize*n, "the test's frames are all the same size")
			frame := frameSize * (n / 2)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			at, mask := flip(frame, frameSize)
			if name == "length made zero" {
				b[at], b[at+1], b[at+2], b[at+3] = 0, 0, 0, 0
			} else {
				b[at] ^= mask
			}
			require.NoError(t, os.WriteFile(path, b, 0o644))

			_, err = eslog.Open(eslog.Options{Dir: dir})
			require.Error(t, err)
			assert.True(t, errors.Is(err, eslog.ErrCorrupt), "%v", err)
			assert.Contains(t, err.Error(), path)
			m := badAt.FindStringSubmatch(err.Error())
			require.NotNil(t, m, err.Error())
			assert.Equal(t, strconv.FormatInt(frame, 10), m[1], err.Error())

			info, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, size, info.Size(), "nothing is cut")
			assert.Empty(t, kept(t, dir))
		})
	}
}

// TestTruncatedFrameIsCutAndKeptAside cuts the newest segment in the middle
// of its last frame, as a crash during the write does: open cuts the partial
// frame, keeps its bytes in a file next to the segment and keeps every
// earlier event.
func TestTruncatedFrameIsCutAndKeptAside(t *testing.T) {
	dir := t.TempDir()
	path, size := writeOneSegment(t, dir, 10)
	frameSize := size / 10
	cut := size - frameSize/2
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(path, cut))

	assert.Equal(t, 9, readAllOf(t, dir))
	names := kept(t, dir)
	require.Len(t, names, 1)
	assert.Equal(t, path+".torn-"+strconv.FormatInt(size-frameSize, 10), names[0])
	tail, err := os.ReadFile(names[0])
	require.NoError(t, err)
	assert.Equal(t, b[size-frameSize:cut], tail, "the cut bytes are kept as they were")
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, size-frameSize, info.Size())
}

// TestBadLastFrameIsCut shows the limit of what open can tell: a damaged
// last frame looks exactly like a torn write, so it is cut (and kept).
func TestBadLastFrameIsCut(t *testing.T) {
	dir := t.TempDir()
	path, size := writeOneSegment(t, dir, 10)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[size-3] ^= 0x01
	require.NoError(t, os.WriteFile(path, b, 0o644))
	assert.Equal(t, 9, readAllOf(t, dir))
	assert.Len(t, kept(t, dir), 1)
}

// TestZeroFilledTailIsCut appends zeros to the newest segment, as
// preallocation or a crash after the size was extended leaves: open cuts them
// without keeping a copy.
func TestZeroFilledTailIsCut(t *testing.T) {
	dir := t.TempDir()
	path, size := writeOneSegment(t, dir, 5)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write(make([]byte, 3<<20))
	require.NoError(t, err)
	require.NoError(t, f.Close())

	assert.Equal(t, 5, readAllOf(t, dir))
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, size, info.Size())
	assert.Empty(t, kept(t, dir), "zeros are not worth keeping")
}

// TestTornTailRepeatedAtTheSameOffsetKeepsBoth crashes twice at the same
// place: the second tail does not overwrite the first.
func TestTornTailRepeatedAtTheSameOffsetKeepsBoth(t *testing.T) {
	dir := t.TempDir()
	path, _ := writeOneSegment(t, dir, 3)
	for i := 0; i < 2; i++ {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.Write([]byte{40, 0, 0, 0, 1, 2, 3, 4, 1, byte(i)})
		require.NoError(t, err)
		require.NoError(t, f.Close())
		assert.Equal(t, 3, readAllOf(t, dir))
	}
	assert.Len(t, kept(t, dir), 2)
}
