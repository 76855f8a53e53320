package eslog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// allEvent is one event of $all as a test compares it.
type allEvent struct {
	key string
	pos uint64
}

// readAllEvents reads $all forwards from the start.
func readAllEvents(t *testing.T, s *eslog.Store) []allEvent {
	t.Helper()
	var out []allEvent
	from := eslog.AllFrom{}
	for {
		page, err := s.ReadAll(eslog.Forwards, from, 500, 0, nil)
		require.NoError(t, err)
		for _, e := range page.Events {
			out = append(out, allEvent{fmt.Sprintf("%s@%d", e.Stream, e.Revision), e.Position})
		}
		if len(page.Events) == 0 || page.End {
			return out
		}
		from.Position = page.Events[len(page.Events)-1].Position + 1
	}
}

// checkReadsFromEveryPosition reads $all one event forwards and one
// backwards from every position in starts, and checks each against want,
// the events that remain in order.
func checkReadsFromEveryPosition(t *testing.T, s *eslog.Store, want []allEvent, starts []uint64, when string) {
	t.Helper()
	for _, p := range starts {
		i := sort.Search(len(want), func(i int) bool { return want[i].pos >= p })
		page, err := s.ReadAll(eslog.Forwards, eslog.AllFrom{Position: p}, 1, 0, nil)
		require.NoError(t, err, "%s: forwards from %d", when, p)
		if i == len(want) {
			assert.Empty(t, page.Events, "%s: forwards from %d", when, p)
		} else if assert.Len(t, page.Events, 1, "%s: forwards from %d", when, p) {
			assert.Equal(t, want[i].pos, page.Events[0].Position, "%s: forwards from %d", when, p)
		}
		page, err = s.ReadAll(eslog.Backwards, eslog.AllFrom{Position: p}, 1, 0, nil)
		require.NoError(t, err, "%s: backwards from %d", when, p)
		if i == 0 {
			assert.Empty(t, page.Events, "%s: backwards from %d", when, p)
		} else if assert.Len(t, page.Events, 1, "%s: backwards from %d", when, p) {
			assert.Equal(t, want[i-1].pos, page.Events[0].Position, "%s: backwards from %d", when, p)
		}
	}
}

// startsAround returns every position of evs and the ones just after and
// before each.
func startsAround(evs []allEvent) []uint64 {
	var out []uint64
	for _, e := range evs {
		out = append(out, e.pos-1, e.pos, e.pos+1)
	}
	return out
}

// survivors returns the events of before that scavenge may not remove.
func survivors(before []allEvent) []allEvent {
	var out []allEvent
	for _, e := range before {
		if !scavengeable(e.key) {
			out = append(out, e)
		}
	}
	return out
}

// TestCompactionShrinksFilesAndKeepsEveryPosition: scavenge writes each
// segment with removed events as a compacted file no bigger than what it
// keeps, and every event that remains is read at its position by $all
// forwards and backwards from every position there was (removed events'
// included) and by its stream, before and after a restart and after the
// index is rebuilt from the log.
func TestCompactionShrinksFilesAndKeepsEveryPosition(t *testing.T) {
	dir := t.TempDir()
	s, err := eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	fillForScavenge(t, s)
	before := readAllEvents(t, s)
	live, err := s.ReadStream("live", eslog.Forwards, 0, false, 1000)
	require.NoError(t, err)
	res, err := s.Scavenge(context.Background())
	require.NoError(t, err)
	require.Positive(t, res.SegmentsRewritten)

	compacted := 0
	for _, p := range segments(t, dir) {
		var base uint64
		_, err := fmt.Sscanf(filepath.Base(p), "%d.log", &base)
		require.NoError(t, err)
		ok, size := eslog.SegmentCompacted(s, base)
		if ok {
			compacted++
			assert.Less(t, size, int64(64<<10), "%s keeps little of its 128 KiB", p)
		}
	}
	assert.Equal(t, res.SegmentsRewritten, compacted)

	want := survivors(before)
	check := func(s *eslog.Store, when string) {
		t.Helper()
		got := readAllEvents(t, s)
		require.Equal(t, want, got[:len(want)], when)
		checkReadsFromEveryPosition(t, s, want, startsAround(before), when)
		page, err := s.ReadStream("live", eslog.Forwards, 0, false, 1000)
		require.NoError(t, err)
		assert.Equal(t, live.Events, page.Events[:len(live.Events)], when)
		page, err = s.ReadStream("gone-8", eslog.Backwards, 0, true, 1000)
		require.NoError(t, err)
		assert.Len(t, page.Events, 5, when)
	}
	check(s, "after scavenge")
	require.NoError(t, s.Close())
	s, err = eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	check(s, "after a restart")
	require.NoError(t, s.Close())
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "index")))
	s, err = eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	defer s.Close()
	check(s, "after the index is rebuilt")
}

// TestCompactionFreesInterleavedSmallEvents: small events of many streams
// interleave, so no 4 KiB block is ever all removed and a sparse rewrite
// frees nothing; a compacted one frees what was removed.
func TestCompactionFreesInterleavedSmallEvents(t *testing.T) {
	dir := t.TempDir()
	s, err := eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	small := func(i int) []eslog.ProposedEvent {
		e := bigEvent(i)
		e.Data = e.Data[:200]
		return []eslog.ProposedEvent{e}
	}
	for i := range 3000 {
		stream := fmt.Sprintf("drop-%d", i%50)
		if i%10 == 0 {
			stream = "keep"
		}
		_, err := s.Append(ctx, stream, eslog.Any, small(i))
		require.NoError(t, err)
	}
	for i := range 50 {
		_, err := s.Tombstone(ctx, fmt.Sprintf("drop-%d", i), eslog.Any)
		require.NoError(t, err)
	}
	_, err = s.Append(ctx, "keep", eslog.Any, small(9999))
	require.NoError(t, err)
	before := logDisk(t, dir)
	res, err := s.Scavenge(ctx)
	require.NoError(t, err)
	after := logDisk(t, dir)
	t.Logf("%+v; disk %d -> %d bytes", res, before, after)
	require.Positive(t, res.EventsRemoved)
	assert.Less(t, after, before*3/10, "nine tenths of the events were removed")
	page, err := s.ReadStream("keep", eslog.Forwards, 0, false, 1000)
	require.NoError(t, err)
	assert.Len(t, page.Events, 301)
}

// TestSecondScavengeOfACompactedSegment removes more from segments that a
// first scavenge compacted; what remains keeps its positions.
func TestSecondScavengeOfACompactedSegment(t *testing.T) {
	dir := t.TempDir()
	s, err := eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	ctx := context.Background()
	fillForScavenge(t, s)
	before := readAllEvents(t, s)
	_, err = s.Scavenge(ctx)
	require.NoError(t, err)
	disk := logDisk(t, dir)
	_, err = s.Tombstone(ctx, "gone-9", eslog.Any)
	require.NoError(t, err)
	setMeta(t, s, "live", `{"$maxCount":10}`)
	res, err := s.Scavenge(ctx)
	require.NoError(t, err)
	require.Positive(t, res.EventsRemoved)
	assert.Less(t, logDisk(t, dir), disk*3/4)
	var want []allEvent
	for _, e := range survivors(before) {
		if !strings.HasPrefix(e.key, "gone-9@") && !strings.HasPrefix(e.key, "live@") {
			want = append(want, e)
		}
	}
	check := func(s *eslog.Store, when string) {
		t.Helper()
		got := readAllEvents(t, s)
		var old []allEvent
		for _, e := range got {
			if e.pos <= before[len(before)-1].pos && !strings.HasPrefix(e.key, "live@") {
				old = append(old, e)
			}
		}
		assert.Equal(t, want, old, when)
		page, err := s.ReadStream("live", eslog.Backwards, 0, true, 1000)
		require.NoError(t, err)
		assert.Len(t, page.Events, 10, when)
		_, err = s.ReadStream("gone-9", eslog.Forwards, 0, false, 10)
		assert.ErrorIs(t, err, eslog.ErrStreamDeleted, when)
	}
	check(s, "after the second scavenge")
	require.NoError(t, s.Close())
	s, err = eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	defer s.Close()
	check(s, "after a restart")
}

// TestOldSparseSegmentsOpenAndCompact: segments that older versions
// scavenged (skip frames and holes) open and read as before, and a later
// scavenge compacts them without changing a position.
func TestOldSparseSegmentsOpenAndCompact(t *testing.T) {
	dir := t.TempDir()
	s, err := eslog.Open(eslog.ScavengingSparse(scavengeOpts(dir)))
	require.NoError(t, err)
	fillForScavenge(t, s)
	before := readAllEvents(t, s)
	res, err := s.Scavenge(context.Background())
	require.NoError(t, err)
	require.Positive(t, res.SegmentsRewritten)
	require.NoError(t, s.Close())
	// The old scavenge kept a soft-deleted stream's last event whole.
	var kept []allEvent
	for _, e := range before {
		if !scavengeable(e.key) || slices.Contains([]string{"gone-0@49", "gone-1@49", "gone-2@49", "gone-3@49", "gone-4@49"}, e.key) {
			kept = append(kept, e)
		}
	}
	want := survivors(before)

	s, err = eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	defer s.Close()
	ok, _ := eslog.SegmentCompacted(s, 0)
	require.False(t, ok, "the old scavenge wrote a sparse segment")
	got := readAllEvents(t, s)
	require.Equal(t, kept, got[:len(kept)])
	checkReadsFromEveryPosition(t, s, kept, startsAround(before), "sparse")
	res, err = s.Scavenge(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int64(5), res.EventsRemoved, "the soft-deleted streams' last events become stubs")
	assert.Positive(t, res.SegmentsRewritten, "the sparse segments are compacted")
	ok, size := eslog.SegmentCompacted(s, 0)
	assert.True(t, ok)
	assert.Less(t, size, int64(64<<10))
	checkReadsFromEveryPosition(t, s, want, startsAround(before), "compacted")
	require.NoError(t, s.Close())
	s, err = eslog.Open(scavengeOpts(dir))
	require.NoError(t, err)
	checkReadsFromEveryPosition(t, s, want, startsAround(before), "after a restart")
}

// TestCrashAtEachStepOfACompaction stops a scavenge where a crash could,
// before the compacted file is renamed over the segment and after, then
// opens the store as after a crash: the old segment or the new one is there,
// no leftover, every event that remains is read at its position, and a
// scavenge completes.
func TestCrashAtEachStepOfACompaction(t *testing.T) {
	errCrash := errors.New("simulated crash")
	for _, step := range []string{"before rename", "after rename"} {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			opts := eslog.ClosingAsCrash(eslog.ScavengeCrashingAt(scavengeOpts(dir), func(at, tmp string) error {
				if at == step {
					if at == "before rename" {
						// What a crash would leave: the scavenge removes
						// its file as it stops, not this link to it.
						require.NoError(t, os.Link(tmp, filepath.Join(dir, "left"+filepath.Ext(tmp))))
					}
					return errCrash
				}
				return nil
			}))
			s, err := eslog.Open(opts)
			require.NoError(t, err)
			fillForScavenge(t, s)
			before := readAllEvents(t, s)
			_, err = s.Scavenge(context.Background())
			require.ErrorIs(t, err, errCrash)
			// Readers go on with whichever file they have.
			want := survivors(before)
			got := readAllEvents(t, s)
			for _, e := range want {
				assert.Contains(t, got, e)
			}
			require.NoError(t, s.Close())
			leftovers, err := filepath.Glob(filepath.Join(dir, "*.scavenge"))
			require.NoError(t, err)
			if step == "before rename" {
				assert.NotEmpty(t, leftovers)
			}

			s, err = eslog.Open(scavengeOpts(dir))
			require.NoError(t, err)
			defer s.Close()
			leftovers, err = filepath.Glob(filepath.Join(dir, "*.scavenge"))
			require.NoError(t, err)
			assert.Empty(t, leftovers, "open removes the interrupted scavenge's file")
			ok, _ := eslog.SegmentCompacted(s, 0)
			assert.Equal(t, step == "after rename", ok)
			got = readAllEvents(t, s)
			for _, e := range want {
				assert.Contains(t, got, e)
			}
			_, err = s.Scavenge(context.Background())
			require.NoError(t, err)
			got = readAllEvents(t, s)
			assert.Equal(t, want, got[:len(want)])
			checkReadsFromEveryPosition(t, s, want, startsAround(before), "after the scavenge")
		})
	}
}

// TestCompactionAgainstAModel appends small events to random streams,
// tombstones some and caps others at two events, and scavenges now and then, with a
// restart in between; after each scavenge $all holds, at their positions,
// exactly the events a model says must remain, plus some of the ones it
// may remove.
func TestCompactionAgainstAModel(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			dir := t.TempDir()
			opts := scavengeOpts(dir)
			opts.SegmentSize = 16 << 10
			s, err := eslog.Open(opts)
			require.NoError(t, err)
			defer func() { s.Close() }()
			ctx := context.Background()
			type stream struct {
				events []allEvent
				tomb   bool
				capped bool // $maxCount 2
			}
			streams := map[string]*stream{}
			var order []string
			for round := range 6 {
				for i := range 300 {
					name := fmt.Sprintf("s-%d", rng.IntN(40))
					st := streams[name]
					if st == nil {
						st = &stream{}
						streams[name] = st
						order = append(order, name)
					}
					if st.tomb {
						continue
					}
					e := bigEvent(round*1000 + i)
					e.Data = e.Data[:rng.IntN(300)]
					r, err := s.Append(ctx, name, eslog.Any, []eslog.ProposedEvent{e})
					require.NoError(t, err)
					st.events = append(st.events, allEvent{fmt.Sprintf("%s@%d", name, r.Revision), r.Position})
				}
				for range 3 {
					name := order[rng.IntN(len(order))]
					st := streams[name]
					if st.tomb || len(st.events) == 0 {
						continue
					}
					if rng.IntN(2) == 0 {
						_, err = s.Tombstone(ctx, name, eslog.Any)
						require.NoError(t, err)
						st.tomb = true
					} else {
						setMeta(t, s, name, `{"$maxCount":2}`)
						st.capped = true
					}
				}
				_, err = s.Scavenge(ctx)
				require.NoError(t, err)
				if round%2 == 1 {
					require.NoError(t, s.Close())
					s, err = eslog.Open(opts)
					require.NoError(t, err)
				}
				got := readAllEvents(t, s)
				gotSet := map[allEvent]bool{}
				for _, e := range got {
					gotSet[e] = true
				}
				var must, may []allEvent
				for _, name := range order {
					st := streams[name]
					for i, e := range st.events {
						switch {
						case st.tomb:
							may = append(may, e)
						case st.capped && i < len(st.events)-2:
							may = append(may, e)
						default:
							must = append(must, e)
						}
					}
				}
				for _, e := range must {
					require.True(t, gotSet[e], "round %d: %s at %d remains", round, e.key, e.pos)
				}
				all := append(must, may...)
				for _, e := range got {
					if !strings.HasPrefix(e.key, "$$") {
						require.Contains(t, all, e, "round %d", round)
					}
				}
				// Positioned reads from where events are or were agree
				// with the whole read.
				var starts []uint64
				for _, e := range slices.Concat(must, may) {
					if rng.IntN(10) == 0 {
						starts = append(starts, e.pos, e.pos+1)
					}
				}
				checkReadsFromEveryPosition(t, s, got, starts, fmt.Sprintf("round %d", round))
			}
		})
	}
}

// TestExpiredStreamKeepsItsRevisionAsAStub: streams of three events, then
// a $maxAge, expire; a scavenge leaves of each a stub of its last event
// (and its metadata), which no read returns, so the log keeps little per
// stream, and the streams' revisions go on: an append expecting the last
// revision succeeds with the next one and an append expecting no stream
// fails, as KurrentDB answers, right away, after a restart and after the
// index is rebuilt from the log.
func TestExpiredStreamKeepsItsRevisionAsAStub(t *testing.T) {
	dir := t.TempDir()
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	opts := scavengeOpts(dir)
	opts.Now = func() time.Time { return time.Unix(0, now.Load()) }
	s, err := eslog.Open(opts)
	require.NoError(t, err)
	ctx := context.Background()
	const streams = 300
	event := func(i int) []eslog.ProposedEvent {
		e := bigEvent(i)
		e.Type, e.ContentType = "TaskStepRecorded", "application/json"
		e.Data, e.Metadata = bytes.Repeat([]byte("d"), 300), bytes.Repeat([]byte("m"), 100)
		return []eslog.ProposedEvent{e}
	}
	for rev := range 3 {
		for i := range streams {
			_, err := s.Append(ctx, fmt.Sprintf("task-%03d", i), eslog.Any, event(rev*streams+i))
			require.NoError(t, err)
		}
	}
	for i := range streams {
		setMeta(t, s, fmt.Sprintf("task-%03d", i), `{"$maxAge":3600}`)
	}
	now.Add(int64(2 * time.Hour))
	_, err = s.Append(ctx, "other", eslog.Any, []eslog.ProposedEvent{bigEvent(9999)})
	require.NoError(t, err)
	written := segmentBytes(t, dir)
	res, err := s.Scavenge(ctx)
	require.NoError(t, err)
	kept := segmentBytes(t, dir)
	t.Logf("%+v; segment files %d -> %d bytes, %d a stream", res, written, kept, (kept-(4<<10))/streams)
	assert.Equal(t, int64(3*streams), res.EventsRemoved)
	// A stub is about 35 bytes and a metadata frame about 90 here: the
	// last event whole would add 440.
	assert.Less(t, kept, int64(4<<10+200*streams), "an expired stream keeps a stub and its metadata")

	check := func(s *eslog.Store, i int, when string) {
		t.Helper()
		name := fmt.Sprintf("task-%03d", i)
		assert.Equal(t, int64(2), s.StreamRevision(name), "%s: %s", when, name)
		page, err := s.ReadStream(name, eslog.Backwards, 0, true, 10)
		require.NoError(t, err, when)
		assert.Empty(t, page.Events, when)
		_, err = s.Append(ctx, name, eslog.NoStreamExpected, event(100000+i))
		var wrong *eslog.WrongExpectedVersionError
		require.ErrorAs(t, err, &wrong, "%s: %s", when, name)
		assert.Equal(t, int64(2), wrong.Current, when)
		r, err := s.Append(ctx, name, eslog.Revision(2), event(200000+i))
		require.NoError(t, err, "%s: %s", when, name)
		assert.Equal(t, int64(3), r.Revision, when)
		page, err = s.ReadStream(name, eslog.Forwards, 0, false, 10)
		require.NoError(t, err, when)
		require.Len(t, page.Events, 1, when)
		assert.Equal(t, uint64(3), page.Events[0].Revision, when)
	}
	for _, e := range readAllEvents(t, s) {
		assert.False(t, strings.HasPrefix(e.key, "task-"), "%s: a stub is not an event of $all", e.key)
	}
	check(s, 0, "after scavenge")
	require.NoError(t, s.Close())
	s, err = eslog.Open(opts)
	require.NoError(t, err)
	check(s, 1, "after a restart")
	res, err = s.Scavenge(ctx)
	require.NoError(t, err)
	assert.Zero(t, res.EventsRemoved, "a stub stays while it is its stream's last event")
	require.NoError(t, s.Close())
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "index")))
	s, err = eslog.Open(opts)
	require.NoError(t, err)
	defer s.Close()
	check(s, 2, "after the index is rebuilt")
	for i := 3; i < streams; i += 37 {
		check(s, i, "after the index is rebuilt")
	}
}

// segmentBytes is the size of the segment files, holes included.
func segmentBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	for _, p := range segments(t, dir) {
		info, err := os.Stat(p)
		require.NoError(t, err)
		total += info.Size()
	}
	return total
}

// TestIndexMergeDropsEntriesOfRemovedFrames: once scavenge has compacted
// the segments of tombstoned streams, index merges drop their entries, so
// the index does not keep an entry for every event ever written; reads and
// a restart are as before. It does so with the segments' position maps in
// the cache and with a cache too small for any, when merges search the maps
// on disk.
func TestIndexMergeDropsEntriesOfRemovedFrames(t *testing.T) {
	for _, budget := range []int64{0, 1} {
		t.Run(fmt.Sprintf("map cache of %d bytes", budget), func(t *testing.T) {
			opts := scavengeOpts(t.TempDir())
			opts.CompactMapCacheBytes = budget
			testIndexMergeDropsEntriesOfRemovedFrames(t, opts)
		})
	}
}

func testIndexMergeDropsEntriesOfRemovedFrames(t *testing.T, opts eslog.Options) {
	s, err := eslog.Open(opts)
	require.NoError(t, err)
	ctx := context.Background()
	small := func(i int) []eslog.ProposedEvent {
		e := bigEvent(i)
		e.Data = e.Data[:100]
		return []eslog.ProposedEvent{e}
	}
	written := 0
	for round := range 8 {
		for i := range 200 {
			_, err := s.Append(ctx, fmt.Sprintf("tmp-%d-%d", round, i%20), eslog.Any, small(written))
			require.NoError(t, err)
			written++
		}
		for i := range 20 {
			_, err := s.Tombstone(ctx, fmt.Sprintf("tmp-%d-%d", round, i), eslog.Any)
			require.NoError(t, err)
		}
		_, err := s.Append(ctx, "keep", eslog.Any, small(written))
		require.NoError(t, err)
		_, err = s.Scavenge(ctx)
		require.NoError(t, err)
	}
	entries := eslog.IndexEntries(s)
	t.Logf("%d events and %d tombstones written; the index tables hold %d entries", written+8, 160, entries)
	assert.Less(t, entries, written/2, "merges dropped most entries of removed events")
	check := func(s *eslog.Store, when string) {
		page, err := s.ReadStream("keep", eslog.Forwards, 0, false, 100)
		require.NoError(t, err, when)
		assert.Len(t, page.Events, 8, when)
		_, err = s.ReadStream("tmp-3-4", eslog.Forwards, 0, false, 100)
		assert.ErrorIs(t, err, eslog.ErrStreamDeleted, when)
		_, err = s.Append(ctx, "tmp-0-0", eslog.Any, small(0))
		assert.ErrorIs(t, err, eslog.ErrStreamDeleted, when)
	}
	check(s, "after the merges")
	require.NoError(t, s.Close())
	s, err = eslog.Open(opts)
	require.NoError(t, err)
	defer s.Close()
	check(s, "after a restart")
}
