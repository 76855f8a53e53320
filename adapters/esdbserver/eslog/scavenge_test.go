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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

func scavengeOpts(dir string) eslog.Options {
	return eslog.Options{Dir: dir, SegmentSize: 128 << 10, IndexMemtableEntries: 64}
}

// logDisk is the disk space the segments take.
func logDisk(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	for _, p := range segments(t, dir) {
		info, err := os.Stat(p)
		require.NoError(t, err)
		total += allocated(info)
	}
	return total
}

func bigEvent(n int) eslog.ProposedEvent {
	var id [16]byte
	binary.LittleEndian.PutUint64(id[:], uint64(n)+1)
	return eslog.ProposedEvent{ID: id, Type: "Big", ContentType: "application/octet-stream", Data: make([]byte, 4<<10)}
}

func setMeta(t *testing.T, s *eslog.Store, stream, meta string) {
	t.Helper()
	_, err := s.Append(context.Background(), eslog.MetadataStreamOf(stream), eslog.Any,
		[]eslog.ProposedEvent{{ID: [16]byte{0xee, byte(len(stream))}, Type: eslog.MetadataEventType, ContentType: "application/json", Data: []byte(meta)}})
	require.NoError(t, err)
}

// readAllPositions returns the position of every event in $all by stream
// and revision.
func readAllPositions(t *testing.T, s *eslog.Store) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	from := eslog.AllFrom{}
	for {
		page, err := s.ReadAll(eslog.Forwards, from, 100, 0, nil)
		require.NoError(t, err)
		for _, e := range page.Events {
			out[fmt.Sprintf("%s@%d", e.Stream, e.Revision)] = e.Position
		}
		if len(page.Events) == 0 || page.End {
			return out
		}
		from.Position = page.Events[len(page.Events)-1].Position + 1
	}
}

// fillForScavenge writes 500 events of 4 KiB over ten streams "gone-N"
// with a "live" stream's event after every tenth, then soft-deletes gone-0
// to gone-4, tombstones gone-5 to gone-7 and keeps the last 5 of gone-8.
func fillForScavenge(t *testing.T, s *eslog.Store) {
	t.Helper()
	ctx := context.Background()
	for i := range 500 {
		_, err := s.Append(ctx, fmt.Sprintf("gone-%d", i%10), eslog.Any, []eslog.ProposedEvent{bigEvent(i)})
		require.NoError(t, err)
		if i%10 == 9 {
			_, err := s.Append(ctx, "live", eslog.Any, []eslog.ProposedEvent{bigEvent(1000 + i)})
			require.NoError(t, err)
		}
	}
	for i := range 5 {
		_, err := s.Delete(ctx, fmt.Sprintf("gone-%d", i), eslog.Any)
		require.NoError(t, err)
	}
	for i := 5; i < 8; i++ {
		_, err := s.Tombstone(ctx, fmt.Sprintf("gone-%d", i), eslog.Any)
		require.NoError(t, err)
	}
	setMeta(t, s, "gone-8", `{"$maxCount":5}`)
	// A write in a new segment, so that every segment with the events
	// above is closed.
	s.Append(ctx, "live", eslog.Any, []eslog.ProposedEvent{bigEvent(5000)}) //nolint:errcheck
}

// scavengeable reports whether scavenge may remove the event key of $all.
func scavengeable(key string) bool {
	var stream string
	var rev int
	if _, err := fmt.Sscanf(strings.Replace(key, "@", " ", 1), "%s %d", &stream, &rev); err != nil {
		return false
	}
	switch stream {
	case "gone-0", "gone-1", "gone-2", "gone-3", "gone-4":
		return true // the last event of a soft-deleted stream becomes a stub, which no read returns
	case "gone-5", "gone-6", "gone-7":
		return true
	case "gone-8":
		return rev < 45
	}
	return false
}

// TestScavengeReclaimsSpaceAndKeepsPositions is the scenario at a
// small scale: 500 events of 4 KiB, then deletes, tombstones and a
// $maxCount; scavenge removes their events from the closed segments, the
// disk space drops, every other event keeps its position, reads are the
// same, and a restart (with the index or rebuilding it from the log) keeps
// all of it.
func TestScavengeReclaimsSpaceAndKeepsPositions(t *testing.T) {
	dir := t.TempDir()
	s, err := eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	fillForScavenge(t, s)
	before := readAllPositions(t, s)
	live, err := s.ReadStream("live", eslog.Forwards, 0, false, 1000)
	require.NoError(t, err)
	kept8, err := s.ReadStream("gone-8", eslog.Forwards, 0, false, 1000)
	require.NoError(t, err)
	require.Len(t, kept8.Events, 5)
	diskBefore := logDisk(t, dir)

	res, err := s.Scavenge(context.Background())
	require.NoError(t, err)
	t.Logf("%+v; disk %d -> %d bytes", res, diskBefore, logDisk(t, dir))
	assert.Positive(t, res.SegmentsRewritten)
	assert.GreaterOrEqual(t, res.EventsRemoved, int64(400), "most of the 440 removable events are in closed segments")

	check := func(s *eslog.Store, when string) {
		after := readAllPositions(t, s)
		removed := 0
		for key, pos := range before {
			got, ok := after[key]
			if scavengeable(key) {
				if !ok {
					removed++
				}
				continue
			}
			if assert.True(t, ok, "%s: %s is still in $all", when, key) {
				assert.Equal(t, pos, got, "%s: %s keeps its position", when, key)
			}
		}
		assert.Equal(t, int(res.EventsRemoved), removed, when)
		for key := range after {
			assert.Contains(t, before, key, when)
		}
		page, err := s.ReadStream("live", eslog.Forwards, 0, false, 1000)
		require.NoError(t, err)
		assert.Equal(t, live.Events, page.Events, when)
		page, err = s.ReadStream("gone-8", eslog.Forwards, 0, false, 1000)
		require.NoError(t, err)
		assert.Equal(t, kept8.Events, page.Events, when)
		page, err = s.ReadStream("gone-8", eslog.Backwards, 0, true, 1000)
		require.NoError(t, err)
		assert.Len(t, page.Events, 5, when)
		_, err = s.ReadStream("gone-0", eslog.Forwards, 0, false, 1000)
		assert.ErrorIs(t, err, eslog.ErrStreamNotFound, when)
		_, err = s.ReadStream("gone-5", eslog.Forwards, 0, false, 1000)
		assert.ErrorIs(t, err, eslog.ErrStreamDeleted, when)
		if diskBefore > int64(1<<20) { // holes are supported where the disk shrank at all
			assert.Less(t, logDisk(t, dir), diskBefore/2, when)
		}
	}
	check(s, "after scavenge")
	diskAfter := logDisk(t, dir)
	if diskAfter < diskBefore {
		assert.Less(t, diskAfter, diskBefore/2, "the disk space of the removed events is freed")
	} else {
		t.Log("the file system here does not free holes")
	}

	again, err := s.Scavenge(context.Background())
	require.NoError(t, err)
	assert.Zero(t, again.EventsRemoved, "a second scavenge finds nothing new")
	require.NoError(t, s.Close())

	s, err = eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	check(s, "after a restart")
	// A soft-deleted stream's revisions go on after its kept last event.
	res2, err := s.Append(context.Background(), "gone-0", eslog.NoStreamExpected, []eslog.ProposedEvent{bigEvent(9000)})
	require.NoError(t, err)
	assert.Equal(t, int64(50), res2.Revision)
	require.NoError(t, s.Close())
	if diskAfter < diskBefore {
		assert.Less(t, logDisk(t, dir), diskBefore/2, "a restart keeps the smaller size")
	}

	// Without its index, open rebuilds it from the log, skip frames and
	// the gaps they leave in streams' revisions included.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "index")))
	s, err = eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	defer s.Close()
	page, err := s.ReadStream("gone-0", eslog.Forwards, 0, false, 1000)
	require.NoError(t, err)
	require.Len(t, page.Events, 1)
	assert.Equal(t, uint64(50), page.Events[0].Revision)
	page, err = s.ReadStream("gone-8", eslog.Forwards, 0, false, 1000)
	require.NoError(t, err)
	assert.Equal(t, kept8.Events, page.Events)
	page, err = s.ReadStream("live", eslog.Forwards, 0, false, 1000)
	require.NoError(t, err)
	assert.Equal(t, live.Events, page.Events[:len(live.Events)])
}

// TestScavengeWhileAppendingAndFollowing scavenges again and again while
// a writer appends and deletes and a follower reads $all from the start:
// the follower sees every event of the live stream once and in order.
func TestScavengeWhileAppendingAndFollowing(t *testing.T) {
	dir := t.TempDir()
	s, err := eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	const total = 600
	var written atomic.Int64
	tick := make(chan struct{}, total/40)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // the writer
		defer wg.Done()
		for i := range total {
			_, err := s.Append(ctx, "live", eslog.Any, []eslog.ProposedEvent{bigEvent(i)})
			if !assert.NoError(t, err) {
				return
			}
			if written.Add(1)%40 == 0 {
				tick <- struct{}{}
			}
			name := fmt.Sprintf("tmp-%d", i/5)
			_, err = s.Append(ctx, name, eslog.Any, []eslog.ProposedEvent{bigEvent(10000 + i)})
			assert.NoError(t, err)
			if i%5 == 4 {
				_, err = s.Tombstone(ctx, name, eslog.Any)
				assert.NoError(t, err)
			}
		}
	}()
	var seen []uint64
	go func() { // the follower
		defer wg.Done()
		from := eslog.AllFrom{}
		for len(seen) < total {
			page, err := s.ReadAll(eslog.Forwards, from, 7, 0, nil)
			if !assert.NoError(t, err) {
				return
			}
			for _, e := range page.Events {
				if e.Stream == "live" {
					seen = append(seen, e.Revision)
				}
				from.Position = e.Position + 1
			}
			if len(page.Events) == 0 {
				<-page.Changed
			}
		}
	}()
	// A catch-up reader that goes through the old segments, the ones being
	// rewritten, a few events a page, and checks the live stream's order.
	var rereads atomic.Int64
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 1 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				next := uint64(0)
				from := eslog.AllFrom{}
				for {
					select {
					case <-stop:
						return
					default:
					}
					page, err := s.ReadAll(eslog.Forwards, from, 3, 0, nil)
					if !assert.NoError(t, err) {
						return
					}
					for _, e := range page.Events {
						if e.Stream == "live" {
							if !assert.Equal(t, next, e.Revision, "a catch-up read sees the live stream in order") {
								return
							}
							next++
						}
						from.Position = e.Position + 1
					}
					if page.End || len(page.Events) == 0 {
						break
					}
				}
				rereads.Add(1)
			}
		}()
	}
	var removed int64
	for range total / 40 { // a scavenge every 40 appends
		<-tick
		res, err := s.Scavenge(ctx)
		require.NoError(t, err)
		removed += res.EventsRemoved
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	t.Logf("catch-up readers read $all %d times", rereads.Load())
	require.Len(t, seen, total)
	for i, r := range seen {
		require.Equal(t, uint64(i), r, "the follower sees each live event once, in order")
	}
	t.Logf("scavenges removed %d events meanwhile", removed)
	page, err := s.ReadStream("live", eslog.Forwards, 0, false, total+1)
	require.NoError(t, err)
	assert.Len(t, page.Events, total)
}

// TestScavengeInterruptedByADiskErrorLosesNothing makes the writes of the
// scavenge's new file fail: the scavenge reports the error, the store keeps
// serving every event, a file left over by a crash at that point is removed
// at open, and the next scavenge succeeds.
func TestScavengeInterruptedByADiskErrorLosesNothing(t *testing.T) {
	dir := t.TempDir()
	var fail atomic.Bool
	opts := eslog.WithFileIO(scavengeOpts(dir), func(f *os.File, b []byte, off int64) (int, error) {
		if fail.Load() && strings.HasSuffix(f.Name(), ".scavenge") {
			n, _ := f.WriteAt(b[:len(b)/2], off)
			return n, &os.PathError{Op: "write", Path: f.Name(), Err: os.ErrInvalid}
		}
		return f.WriteAt(b, off)
	}, nil)
	s, err := eslog.Open(opts)
	require.NoError(t, err)
	fillForScavenge(t, s)
	before := readAllPositions(t, s)
	fail.Store(true)
	_, err = s.Scavenge(context.Background())
	require.Error(t, err)
	assert.Equal(t, before, readAllPositions(t, s), "a failed scavenge changes nothing")
	require.NoError(t, s.Close())

	// What a kill between writing and renaming the new file leaves.
	segs := segments(t, dir)
	require.NoError(t, os.WriteFile(segs[0]+".scavenge", []byte("half a segment"), 0o644))
	s, err = eslog.Open(opts)
	require.NoError(t, err)
	defer s.Close()
	_, err = os.Stat(segs[0] + ".scavenge")
	assert.True(t, os.IsNotExist(err), "open removes an interrupted scavenge's file")
	assert.Equal(t, before, readAllPositions(t, s))
	fail.Store(false)
	res, err := s.Scavenge(context.Background())
	require.NoError(t, err)
	assert.Positive(t, res.EventsRemoved)
}

const scavengeChildEnv = "SAGA_ESLOG_SCAVENGE_CHILD_DIR"

// scavengeChild appends to "live-N" streams, printing one line per
// acknowledged append, while it writes and tombstones other streams and
// scavenges without pause, until it is killed.
func scavengeChild(dir string) {
	opts := scavengeOpts(dir)
	opts.Logger = slog.New(slog.DiscardHandler)
	s, err := eslog.Open(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	fmt.Println("ready")
	go func() {
		for {
			if _, err := s.Scavenge(ctx); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(4)
			}
		}
	}()
	for i := 0; ; i++ {
		name := fmt.Sprintf("live-%d", i%7)
		e := bigEvent(i)
		binary.LittleEndian.PutUint64(e.ID[8:], uint64(os.Getpid()))
		res, err := s.Append(ctx, name, eslog.Any, []eslog.ProposedEvent{e})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fmt.Printf("ack %s %d %d %x\n", name, res.Revision, res.Position, e.ID)
		tmp := fmt.Sprintf("tmp-%d-%d", os.Getpid(), i/4)
		if _, err := s.Append(ctx, tmp, eslog.Any, []eslog.ProposedEvent{bigEvent(1 << 20)}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		if i%4 == 3 {
			if _, err := s.Tombstone(ctx, tmp, eslog.Any); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(3)
			}
		}
	}
}

// TestKillDuringScavengeLosesNothing kills, with SIGKILL, a process that
// scavenges without pause while it appends, so that kills land in the
// middle of rewriting, renaming and swapping segments. After each kill the
// store opens and every acknowledged event of the live streams is read back
// at its revision and position, from the stream and from $all.
func TestKillDuringScavengeLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes")
	}
	dir := t.TempDir()
	type ack struct {
		id  string
		pos uint64
	}
	acked := map[string]map[uint64]ack{}
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), scavengeChildEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() {
			_ = cmd.Wait()
			t.Fatal(stderr.String())
		}
		require.Equal(t, "ready", lines.Text())
		time.AfterFunc(time.Duration(400+rand.IntN(400))*time.Millisecond, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
		n := 0
		for lines.Scan() {
			f := strings.Fields(lines.Text())
			if len(f) != 5 {
				continue // the kill cut the line
			}
			rev, _ := strconv.ParseUint(f[2], 10, 64)
			pos, _ := strconv.ParseUint(f[3], 10, 64)
			if acked[f[1]] == nil {
				acked[f[1]] = map[uint64]ack{}
			}
			acked[f[1]][rev] = ack{id: f[4], pos: pos}
			n++
		}
		_ = cmd.Wait()
		require.Positive(t, n, "round %d: %s", round, stderr.String())

		s, err := eslog.Open(scavengeOpts(dir))
		require.NoError(t, err, "round %d", round)
		all := readAllPositions(t, s)
		for name, revs := range acked {
			page, err := s.ReadStream(name, eslog.Forwards, 0, false, 1<<20)
			require.NoError(t, err, name)
			for rev, a := range revs {
				require.Less(t, rev, uint64(len(page.Events)), "%s@%d acknowledged, round %d", name, rev, round)
				e := page.Events[rev]
				assert.Equal(t, a.id, fmt.Sprintf("%x", e.ID), "%s@%d", name, rev)
				assert.Equal(t, a.pos, e.Position, "%s@%d", name, rev)
				assert.Equal(t, a.pos, all[fmt.Sprintf("%s@%d", name, rev)], "%s@%d in $all", name, rev)
			}
		}
		res, err := s.Scavenge(context.Background())
		require.NoError(t, err, "round %d", round)
		t.Logf("round %d: %d acknowledged; a scavenge after the restart: %+v", round, n, res)
		require.NoError(t, s.Close())
	}
}

// TestReadAcrossAScavengedSegment pauses a $all read while scavenge
// rewrites the segments under it: the read goes on from the new files
// (jumping from the nearest sample over what was removed) and misses none
// of the events that remain.
func TestReadAcrossAScavengedSegment(t *testing.T) {
	for _, after := range []int{3, 40, 90} {
		s, err := eslog.Open(scavengeOpts(t.TempDir()))
		require.NoError(t, err)
		defer s.Close()
		fillForScavenge(t, s)
		var res eslog.ScavengeResult
		got, err := eslog.ScanPausing(s, after, func() {
			res, err = s.Scavenge(context.Background())
			require.NoError(t, err)
		})
		require.NoError(t, err)
		require.Positive(t, res.EventsRemoved)
		t.Logf("pause after %d frames: %+v", after, res)
		var live []string
		seen := map[string]bool{}
		for _, key := range got {
			require.False(t, seen[key], "%s read twice", key)
			seen[key] = true
			if strings.HasPrefix(key, "live@") {
				live = append(live, key)
			}
		}
		require.Len(t, live, 51)
		for i, key := range live {
			assert.Equal(t, fmt.Sprintf("live@%d", i), key)
		}
		for _, key := range []string{"gone-9@0", "gone-9@49", "gone-8@49"} {
			assert.True(t, seen[key], "%s is read", key)
		}
	}
}

// TestScavengeOfExpiredEvents removes the events older than $maxAge but a
// stream's last one; reads, which skip the expired events already, are the
// same before and after, and after a restart that rebuilds the index.
func TestScavengeOfExpiredEvents(t *testing.T) {
	dir := t.TempDir()
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	opts := scavengeOpts(dir)
	opts.Now = func() time.Time { return time.Unix(0, now.Load()) }
	s, err := eslog.Open(opts)
	require.NoError(t, err)
	ctx := context.Background()
	setMeta(t, s, "aging", `{"$maxAge":3600}`)
	setMeta(t, s, "expired", `{"$maxAge":3600}`)
	for i := range 100 {
		_, err := s.Append(ctx, "aging", eslog.Any, []eslog.ProposedEvent{bigEvent(i)})
		require.NoError(t, err)
		_, err = s.Append(ctx, "expired", eslog.Any, []eslog.ProposedEvent{bigEvent(1000 + i)})
		require.NoError(t, err)
		if i == 49 {
			now.Add(int64(2 * time.Hour)) // the first 50 of each expire
		}
	}
	now.Add(int64(30 * time.Minute))
	_, err = s.Append(ctx, "other", eslog.Any, []eslog.ProposedEvent{bigEvent(5000)})
	require.NoError(t, err)
	read := func(s *eslog.Store, stream string, dir eslog.Direction) []eslog.RecordedEvent {
		page, err := s.ReadStream(stream, dir, 0, dir == eslog.Backwards, 1000)
		require.NoError(t, err)
		return page.Events
	}
	before := read(s, "aging", eslog.Forwards)
	require.Len(t, before, 50)
	res, err := s.Scavenge(ctx)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, res.EventsRemoved, int64(100), "the expired halves of both streams")
	assert.Equal(t, before, read(s, "aging", eslog.Forwards))
	assert.Len(t, read(s, "aging", eslog.Backwards), 50)

	now.Add(int64(2 * time.Hour)) // now every event has expired
	_, err = s.Append(ctx, "other", eslog.Any, []eslog.ProposedEvent{bigEvent(5001)})
	require.NoError(t, err)
	res, err = s.Scavenge(ctx)
	require.NoError(t, err)
	assert.Empty(t, read(s, "expired", eslog.Forwards))
	assert.Equal(t, int64(99), s.StreamRevision("expired"), "the last event is kept, so the revision stays")
	require.NoError(t, s.Close())

	require.NoError(t, os.RemoveAll(filepath.Join(dir, "index")))
	s, err = eslog.Open(opts)
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, int64(99), s.StreamRevision("expired"))
	assert.Equal(t, int64(99), s.StreamRevision("aging"))
	res2, err := s.Append(ctx, "expired", eslog.Revision(99), []eslog.ProposedEvent{bigEvent(7000)})
	require.NoError(t, err)
	assert.Equal(t, int64(100), res2.Revision)
	assert.Len(t, read(s, "expired", eslog.Forwards), 1)
}

// TestScavengeWithStreamsSharingAHash tombstones one of two streams whose
// names hash alike and scavenges: the other reads and appends as before,
// and the tombstoned one stays deleted, before and after a restart.
func TestScavengeWithStreamsSharingAHash(t *testing.T) {
	eslog.WeakHash(t)
	dir := t.TempDir()
	s, err := eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 100 {
		_, err := s.Append(ctx, []string{"aa", "bb"}[i%2], eslog.Any, []eslog.ProposedEvent{bigEvent(i)})
		require.NoError(t, err)
	}
	_, err = s.Tombstone(ctx, "aa", eslog.Any)
	require.NoError(t, err)
	_, err = s.Append(ctx, "cc", eslog.Any, []eslog.ProposedEvent{bigEvent(500)})
	require.NoError(t, err)
	res, err := s.Scavenge(ctx)
	require.NoError(t, err)
	assert.Positive(t, res.EventsRemoved)
	for round := range 2 {
		page, err := s.ReadStream("bb", eslog.Forwards, 0, false, 1000)
		require.NoError(t, err, "round %d", round)
		assert.Len(t, page.Events, 50+round)
		_, err = s.ReadStream("aa", eslog.Forwards, 0, false, 1000)
		assert.ErrorIs(t, err, eslog.ErrStreamDeleted)
		_, err = s.Append(ctx, "aa", eslog.Any, []eslog.ProposedEvent{bigEvent(600)})
		assert.ErrorIs(t, err, eslog.ErrStreamDeleted)
		_, err = s.Append(ctx, "bb", eslog.Revision(uint64(49+round)), []eslog.ProposedEvent{bigEvent(700 + round)})
		require.NoError(t, err, "round %d", round)
		require.NoError(t, s.Close())
		s, err = eslog.Open(scavengeOpts(dir))
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
}

// TestCloseDuringScavenge closes the store while a scavenge runs: Close
// waits for it to stop, the scavenge ends with nil or ErrClosed, and the
// store opens again with every event that was not removed.
func TestCloseDuringScavenge(t *testing.T) {
	for round := range 3 {
		dir := t.TempDir()
		s, err := eslog.Open(scavengeOpts(dir))
		require.NoError(t, err)
		fillForScavenge(t, s)
		before := readAllPositions(t, s)
		done := make(chan error, 1)
		go func() {
			_, err := s.Scavenge(context.Background())
			done <- err
		}()
		require.NoError(t, s.Close())
		err = <-done
		if err != nil {
			require.ErrorIs(t, err, eslog.ErrClosed, "round %d", round)
		}
		s, err = eslog.Open(scavengeOpts(dir))
		require.NoError(t, err)
		for key, pos := range readAllPositions(t, s) {
			assert.Equal(t, before[key], pos, key)
		}
		page, err := s.ReadStream("live", eslog.Forwards, 0, false, 1000)
		require.NoError(t, err)
		assert.Len(t, page.Events, 51)
		require.NoError(t, s.Close())
	}
}
