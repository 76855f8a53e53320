package eslog_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

const crashChildEnv = "SAGA_ESLOG_CRASH_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	if dir := os.Getenv(scavengeChildEnv); dir != "" {
		scavengeChild(dir)
		return
	}
	os.Exit(m.Run())
}

// smallIndex makes the store flush, checkpoint and merge its index every
// few dozen events.
func smallIndex(dir string) eslog.Options {
	return eslog.Options{Dir: dir, SegmentSize: 8 << 10, IndexMemtableEntries: 40, IndexCacheStreams: 4}
}

// crashChild appends to a store with a small index from 16 goroutines,
// printing one line per acknowledged append, until it is killed.
func crashChild(dir string) {
	s, err := eslog.Open(smallIndex(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	fmt.Println("ready")
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				name := fmt.Sprintf("c%d-%d", w, i%50)
				var id [16]byte
				binary.LittleEndian.PutUint64(id[:], rand.Uint64())
				binary.LittleEndian.PutUint64(id[8:], rand.Uint64())
				res, err := s.Append(context.Background(), name, eslog.Any, []eslog.ProposedEvent{{ID: id, Type: "E", Data: []byte("{}")}})
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Fprintf(out, "ack %s %d %d %x\n", name, res.Revision, res.Position, id)
				_ = out.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// TestKillDuringIndexWritesLosesNothing kills, with SIGKILL, a process
// that appends to a store whose index writes a table, a checkpoint or a
// merge every few dozen events, so that kills land in the middle of them.
// After each kill the store opens and every acknowledged event is read back
// at its revision and position.
func TestKillDuringIndexWritesLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes")
	}
	dir := t.TempDir()
	acked := map[string]map[uint64]string{}
	positions := map[string]map[uint64]uint64{}
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() {
			_ = cmd.Wait() // stderr is being written until the child is waited for
			t.Fatal(stderr.String())
		}
		require.Equal(t, "ready", lines.Text())
		time.AfterFunc(time.Duration(300+rand.IntN(400))*time.Millisecond, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
		n := 0
		for lines.Scan() {
			f := strings.Fields(lines.Text())
			if len(f) != 5 {
				continue // the kill cut the line
			}
			rev, _ := strconv.ParseUint(f[2], 10, 64)
			pos, _ := strconv.ParseUint(f[3], 10, 64)
			if acked[f[1]] == nil {
				acked[f[1]], positions[f[1]] = map[uint64]string{}, map[uint64]uint64{}
			}
			acked[f[1]][rev], positions[f[1]][rev] = f[4], pos
			n++
		}
		_ = cmd.Wait()
		require.Positive(t, n, "round %d: %s", round, stderr.String())

		s, err := eslog.Open(smallIndex(dir))
		require.NoError(t, err, "round %d", round)
		st := s.Stats()
		assert.Positive(t, st.IndexTables, "round %d: the index has tables", round)
		for name, revs := range acked {
			page, err := s.ReadStream(name, eslog.Forwards, 0, false, 1<<20)
			require.NoError(t, err, name)
			for rev, id := range revs {
				require.Less(t, rev, uint64(len(page.Events)), "%s@%d acknowledged, round %d", name, rev, round)
				e := page.Events[rev]
				assert.Equal(t, id, fmt.Sprintf("%x", e.ID), "%s@%d", name, rev)
				assert.Equal(t, positions[name][rev], e.Position, "%s@%d", name, rev)
			}
		}
		require.NoError(t, s.Close())
	}
}

// fillIndexed writes 600 events over 30 streams with a small index and
// returns the store's directory and the events' ids by stream.
func fillIndexed(t *testing.T) (string, map[string][][16]byte) {
	t.Helper()
	dir := t.TempDir()
	s, err := eslog.Open(smallIndex(dir))
	require.NoError(t, err)
	want := map[string][][16]byte{}
	for i := range 600 {
		name := fmt.Sprintf("s-%d", i%30)
		e := ev(0)
		e.ID = [16]byte{byte(i), byte(i >> 8), 0xcc}
		_, err := s.Append(context.Background(), name, eslog.Any, []eslog.ProposedEvent{e})
		require.NoError(t, err)
		want[name] = append(want[name], e.ID)
	}
	require.NoError(t, s.Close())
	return dir, want
}

func requireAll(t *testing.T, s *eslog.Store, want map[string][][16]byte) {
	t.Helper()
	total := 0
	for name, ids := range want {
		total += len(ids)
		page, err := s.ReadStream(name, eslog.Forwards, 0, false, 1000)
		require.NoError(t, err, name)
		got := make([][16]byte, 0, len(page.Events))
		for _, e := range page.Events {
			got = append(got, e.ID)
		}
		require.Equal(t, ids, got, name)
	}
	page, err := s.ReadAll(eslog.Forwards, eslog.AllFrom{}, 10_000, 0, nil)
	require.NoError(t, err)
	assert.Len(t, page.Events, total)
}

func logBytes(t *testing.T, dir string) uint64 {
	var total uint64
	for _, name := range segments(t, dir) {
		info, err := os.Stat(name)
		require.NoError(t, err)
		total += uint64(info.Size())
	}
	return total
}

// TestOpenReplaysOnlyTheLogAfterTheCheckpoint reopens a store whose index
// was checkpointed: open reads only the tail.
func TestOpenReplaysOnlyTheLogAfterTheCheckpoint(t *testing.T) {
	dir, want := fillIndexed(t)
	s, err := eslog.Open(smallIndex(dir))
	require.NoError(t, err)
	defer s.Close()
	st := s.Stats()
	assert.Less(t, st.Replayed, logBytes(t, dir)/5, "the log after the last checkpoint, at most two memtables")
	requireAll(t, s, want)
}

// TestOpenAfterACleanCloseReplaysNothing closes a store with events in its
// memtable: the close writes them to the index, so the next open reads no
// log and still finds every event, and events appended after that open
// are indexed and found after the next one. Closed as a crash would, the
// same store replays its tail.
func TestOpenAfterACleanCloseReplaysNothing(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			opts := eslog.Options{Dir: dir, IndexMemtableEntries: 1000}
			if crash {
				opts = eslog.ClosingAsCrash(opts)
			}
			want := map[string][][16]byte{}
			for round := range 3 {
				s, err := eslog.Open(opts)
				require.NoError(t, err)
				if round > 0 {
					if crash {
						assert.Positive(t, s.Stats().Replayed, "a crash leaves the memtable to the log")
					} else {
						assert.Zero(t, s.Stats().Replayed, "a clean close wrote the memtable to the index")
					}
				}
				requireAll(t, s, want)
				for i := range 150 { // fewer than a memtable: nothing is flushed while open
					name := fmt.Sprintf("s-%d", i%7)
					e := ev(byte(i))
					e.ID = [16]byte{byte(round), byte(i), 0xdd}
					_, err := s.Append(context.Background(), name, eslog.Any, []eslog.ProposedEvent{e})
					require.NoError(t, err)
					want[name] = append(want[name], e.ID)
				}
				require.NoError(t, s.Close())
			}
			s, err := eslog.Open(eslog.Options{Dir: dir})
			require.NoError(t, err)
			defer s.Close()
			requireAll(t, s, want)
		})
	}
}

// TestReadsDuringACleanCloseRace reads while a store with a full memtable
// closes: the close's flush of the memtable swaps it under the lock readers
// take (run with -race).
func TestReadsDuringACleanCloseRace(t *testing.T) {
	s, err := eslog.Open(eslog.Options{Dir: t.TempDir(), IndexMemtableEntries: 1000})
	require.NoError(t, err)
	for i := range 100 {
		e := ev(byte(i))
		e.ID = [16]byte{byte(i), 0xab}
		_, err := s.Append(context.Background(), "s", eslog.Any, []eslog.ProposedEvent{e})
		require.NoError(t, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			_, _ = s.ReadStream("s", eslog.Forwards, 0, false, 10) // may fail once closed
		}
	}()
	require.NoError(t, s.Close())
	<-done
}

// TestCorruptByteAfterACleanClose corrupts an event's byte after a clean
// close, which left open nothing to replay. In the newest part of the
// indexed log, which open checks, open refuses naming the file and offset;
// older log is not read at open, and there the read that meets the event
// fails with ErrCorrupt rather than serving it.
func TestCorruptByteAfterACleanClose(t *testing.T) {
	for _, recent := range []bool{true, false} {
		t.Run(fmt.Sprintf("recent=%v", recent), func(t *testing.T) {
			dir := t.TempDir()
			s, err := eslog.Open(eslog.Options{Dir: dir})
			require.NoError(t, err)
			// A few hundred KiB of log, so that its end is far from its start.
			for round := range 30 {
				var batch []eslog.AppendRequest
				for i := range 100 {
					e := ev(1)
					e.ID = [16]byte{byte(round), byte(i), 0xee}
					e.Data = []byte(`{"x":"` + strings.Repeat("x", 100) + `"}`)
					batch = append(batch, eslog.AppendRequest{Stream: "s", Expected: eslog.Any, Events: []eslog.ProposedEvent{e}})
				}
				_, errs := s.AppendAll(context.Background(), batch)
				for _, err := range errs {
					require.NoError(t, err)
				}
			}
			require.NoError(t, s.Close())
			segs, err := filepath.Glob(filepath.Join(dir, "*.log"))
			require.NoError(t, err)
			require.Len(t, segs, 1)
			b, err := os.ReadFile(segs[0])
			require.NoError(t, err)
			require.Greater(t, len(b), 200<<10)
			if recent {
				b[len(b)-100] ^= 0xff // in the last frame
			} else {
				b[100] ^= 0xff // in the first frames
			}
			require.NoError(t, os.WriteFile(segs[0], b, 0o644))

			opts := eslog.Options{Dir: dir}
			if !recent {
				opts = eslog.VerifyingLastBytes(opts, 1) // from the sample before the last frame
			}
			s, err = eslog.Open(opts)
			if recent {
				require.ErrorIs(t, err, eslog.ErrCorrupt)
				assert.Contains(t, err.Error(), filepath.Base(segs[0]))
				assert.Contains(t, err.Error(), "at byte")
				return
			}
			require.NoError(t, err)
			defer s.Close()
			_, err = s.ReadStream("s", eslog.Forwards, 0, false, 100)
			require.ErrorIs(t, err, eslog.ErrCorrupt)
			_, err = s.ReadAll(eslog.Forwards, eslog.AllFrom{}, 100, 0, nil)
			require.ErrorIs(t, err, eslog.ErrCorrupt)
			page, err := s.ReadStream("s", eslog.Backwards, 0, true, 10)
			require.NoError(t, err, "the newest events are intact and served")
			assert.Len(t, page.Events, 10)
		})
	}
}

// TestDamagedIndexFallsBackToARescan leaves the index directory as a crash
// or a damaged disk can: a table or checkpoint cut in the middle of its
// write, stray files, a checkpoint that does not match the log. Open keeps
// working from the checkpoint where it can, rebuilds the index from the log
// where it cannot, and loses nothing.
func TestDamagedIndexFallsBackToARescan(t *testing.T) {
	for name, tc := range map[string]struct {
		damage func(t *testing.T, idx string)
		rescan bool
	}{
		"table and checkpoint cut while being written": {damage: func(t *testing.T, idx string) {
			require.NoError(t, os.WriteFile(filepath.Join(idx, "table-0000000000999999.idx"), []byte("half a table"), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(idx, "CHECKPOINT.tmp"), []byte("ESL"), 0o644))
		}},
		"positions written after the checkpoint": {damage: func(t *testing.T, idx string) {
			f, err := os.OpenFile(filepath.Join(idx, "positions"), os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.Write([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}},
		"checkpoint damaged": {rescan: true, damage: func(t *testing.T, idx string) {
			path := filepath.Join(idx, "CHECKPOINT")
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			b[12] ^= 0x10
			require.NoError(t, os.WriteFile(path, b, 0o644))
		}},
		"checkpoint cut short": {rescan: true, damage: func(t *testing.T, idx string) {
			require.NoError(t, os.Truncate(filepath.Join(idx, "CHECKPOINT"), 30))
		}},
		"table cut short": {rescan: true, damage: func(t *testing.T, idx string) {
			tables, err := filepath.Glob(filepath.Join(idx, "table-*.idx"))
			require.NoError(t, err)
			require.NotEmpty(t, tables)
			require.NoError(t, os.Truncate(tables[0], 100))
		}},
		"table's filter damaged": {rescan: true, damage: func(t *testing.T, idx string) {
			tables, err := filepath.Glob(filepath.Join(idx, "table-*.idx"))
			require.NoError(t, err)
			require.NotEmpty(t, tables)
			b, err := os.ReadFile(tables[0])
			require.NoError(t, err)
			b[len(b)-41] ^= 0x01 // the filter's last byte, just before the 40-byte footer
			require.NoError(t, os.WriteFile(tables[0], b, 0o644))
		}},
		"table missing": {rescan: true, damage: func(t *testing.T, idx string) {
			tables, err := filepath.Glob(filepath.Join(idx, "table-*.idx"))
			require.NoError(t, err)
			require.NoError(t, os.Remove(tables[len(tables)-1]))
		}},
		"index directory removed": {rescan: true, damage: func(t *testing.T, idx string) {
			require.NoError(t, os.RemoveAll(idx))
		}},
	} {
		t.Run(name, func(t *testing.T) {
			dir, want := fillIndexed(t)
			tc.damage(t, filepath.Join(dir, "index"))
			var logs bytes.Buffer
			opts := smallIndex(dir)
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			s, err := eslog.Open(opts)
			require.NoError(t, err)
			defer s.Close()
			if tc.rescan {
				assert.Equal(t, logBytes(t, dir), s.Stats().Replayed, "the whole log is replayed")
				if name != "index directory removed" {
					assert.Contains(t, logs.String(), "rebuilding the index")
				}
			} else {
				assert.Less(t, s.Stats().Replayed, logBytes(t, dir)/5)
			}
			requireAll(t, s, want)
			stray, err := filepath.Glob(filepath.Join(dir, "index", "*9999*"))
			require.NoError(t, err)
			assert.Empty(t, stray, "files no checkpoint names are removed")
			// The rebuilt index is checkpointed again.
			require.NoError(t, s.Close())
			s, err = eslog.Open(smallIndex(dir))
			require.NoError(t, err)
			assert.Less(t, s.Stats().Replayed, logBytes(t, dir)/5)
			requireAll(t, s, want)
		})
	}
}

// TestCheckpointAheadOfTheLogIsDropped cuts the log back to an earlier
// frame, as an operator does to give up a damaged tail: the checkpoint
// covers frames that are gone, so open rebuilds the index from what is left.
func TestCheckpointAheadOfTheLogIsDropped(t *testing.T) {
	dir, _ := fillIndexed(t)
	segs := segments(t, dir)
	first := segs[0]
	for _, later := range segs[1:] {
		require.NoError(t, os.Remove(later))
	}
	s, err := eslog.Open(smallIndex(dir))
	require.NoError(t, err)
	defer s.Close()
	info, err := os.Stat(first)
	require.NoError(t, err)
	assert.Equal(t, uint64(info.Size()), s.Stats().Replayed)
	page, err := s.ReadAll(eslog.Forwards, eslog.AllFrom{}, 10_000, 0, nil)
	require.NoError(t, err)
	require.NotEmpty(t, page.Events)
	for _, e := range page.Events {
		got, err := s.ReadStream(e.Stream, eslog.Forwards, e.Revision, false, 1)
		require.NoError(t, err)
		require.Len(t, got.Events, 1)
		assert.Equal(t, e.ID, got.Events[0].ID)
	}
	last := page.Events[len(page.Events)-1]
	assert.Equal(t, last.Revision, uint64(s.StreamRevision(last.Stream)), "revisions past the cut are gone")
}
