package eslog_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

func ev(id byte) eslog.ProposedEvent {
	return eslog.ProposedEvent{ID: [16]byte{id}, Type: "E", ContentType: "application/json", Data: []byte(`{"x":1}`)}
}

func open(t *testing.T, dir string) *eslog.Store {
	t.Helper()
	s, err := eslog.Open(eslog.Options{Dir: dir, SegmentSize: 200})
	require.NoError(t, err)
	return s
}

func segments(t *testing.T, dir string) []string {
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	require.NoError(t, err)
	return names
}

func TestTornTailIsCutAndWritingResumes(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	for i := 1; i <= 10; i++ {
		_, err := s.Append(context.Background(), "s", eslog.Any, []eslog.ProposedEvent{ev(byte(i))})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	segs := segments(t, dir)
	require.Greater(t, len(segs), 1, "small segments roll over")

	last := segs[len(segs)-1]
	f, err := os.OpenFile(last, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte{40, 0, 0, 0, 1, 2, 3, 4, 1, 1}) // a frame cut short
	require.NoError(t, err)
	require.NoError(t, f.Close())

	s = open(t, dir)
	page, err := s.ReadStream("s", eslog.Forwards, 0, false, 100)
	require.NoError(t, err)
	assert.Len(t, page.Events, 10)
	res, err := s.Append(context.Background(), "s", eslog.Revision(9), []eslog.ProposedEvent{ev(11)})
	require.NoError(t, err)
	assert.Equal(t, int64(10), res.Revision)
	require.NoError(t, s.Close())

	s = open(t, dir)
	defer s.Close()
	page, err = s.ReadStream("s", eslog.Forwards, 0, false, 100)
	require.NoError(t, err)
	assert.Len(t, page.Events, 11)
	all, err := s.ReadAll(eslog.Forwards, eslog.AllFrom{}, 100, 0, nil)
	require.NoError(t, err)
	assert.Len(t, all.Events, 11, "reads of $all span segments")
}

func TestCorruptionBeforeTheTailIsReported(t *testing.T) {
	dir := t.TempDir()
	s, err := eslog.Open(eslog.ClosingAsCrash(eslog.Options{Dir: dir, SegmentSize: 200}))
	require.NoError(t, err)
	for i := 1; i <= 10; i++ {
		_, err := s.Append(context.Background(), "s", eslog.Any, []eslog.ProposedEvent{ev(byte(i))})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	first := segments(t, dir)[0]
	b, err := os.ReadFile(first)
	require.NoError(t, err)
	b[20] ^= 0xff
	require.NoError(t, os.WriteFile(first, b, 0o644))
	_, err = eslog.Open(eslog.Options{Dir: dir, SegmentSize: 200})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "checksum")
}

// TestSecondOpenOfADirectoryFails opens a directory twice in one process:
// the second open fails at once with ErrLocked naming the directory, and
// succeeds once the first store is closed.
func TestSecondOpenOfADirectoryFails(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	_, err := eslog.Open(eslog.Options{Dir: dir})
	require.Error(t, err)
	assert.ErrorIs(t, err, eslog.ErrLocked)
	assert.Contains(t, err.Error(), dir)
	assert.Contains(t, err.Error(), "in use by another process")
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "closing twice is harmless")

	s = open(t, dir)
	require.NoError(t, s.Close())
}

// TestReadsKeepEachEventsNames reads events whose types and content types
// change from one event to the next, within an append and across appends,
// forwards and backwards: reads share a name only with the events that
// carry it.
func TestReadsKeepEachEventsNames(t *testing.T) {
	s, err := eslog.Open(eslog.Options{Dir: t.TempDir()})
	require.NoError(t, err)
	defer s.Close()
	types := []string{"A", "A", "B", "Bb", "A", "", "C"}
	contentTypes := []string{"application/json", "text/plain", "text/plain", "application/json", "x", "x", "y"}
	var want []eslog.ProposedEvent
	for round := 0; round < 3; round++ {
		var batch []eslog.ProposedEvent
		for i := range types {
			typ := types[(i+round)%len(types)]
			if typ == "" {
				typ = "Z" // A type is required.
			}
			batch = append(batch, eslog.ProposedEvent{ID: [16]byte{byte(round), byte(i)}, Type: typ, ContentType: contentTypes[i], Data: []byte{byte(i)}})
		}
		_, err := s.Append(context.Background(), "s", eslog.Any, batch)
		require.NoError(t, err)
		want = append(want, batch...)
	}
	names := func(events []eslog.RecordedEvent) (out [][2]string) {
		for _, e := range events {
			out = append(out, [2]string{e.Type, e.ContentType})
		}
		return out
	}
	var wantNames [][2]string
	for _, e := range want {
		wantNames = append(wantNames, [2]string{e.Type, e.ContentType})
	}
	all, err := s.ReadAll(eslog.Forwards, eslog.AllFrom{}, 100, 0, nil)
	require.NoError(t, err)
	assert.Equal(t, wantNames, names(all.Events))
	stream, err := s.ReadStream("s", eslog.Forwards, 0, false, 100)
	require.NoError(t, err)
	assert.Equal(t, wantNames, names(stream.Events))
	back, err := s.ReadAll(eslog.Backwards, eslog.AllFrom{FromEnd: true}, 100, 0, nil)
	require.NoError(t, err)
	slices.Reverse(wantNames)
	assert.Equal(t, wantNames, names(back.Events))
}
