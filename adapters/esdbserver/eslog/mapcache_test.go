package eslog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// TestCompactMapCacheStaysWithinItsBudget: the position maps of many
// compacted segments, each with hundreds of runs, take several times the
// cache's budget; reading across all of them, by $all from the start and
// from positions all over and by every stream, leaves the cache within the
// budget, and every read returns what a store that holds every map returns,
// before and after a restart.
func TestCompactMapCacheStaysWithinItsBudget(t *testing.T) {
	const budget = 24 << 10
	dir := t.TempDir()
	opts := scavengeOpts(dir)
	opts.CompactMapCacheBytes = budget
	s, err := eslog.Open(opts)
	require.NoError(t, err)
	ctx := context.Background()
	// Kept and removed events alternate, so each segment keeps hundreds
	// of runs of one event each.
	var batch []eslog.AppendRequest
	for i := range 6000 {
		e := bigEvent(i)
		e.Data = e.Data[:200]
		stream := fmt.Sprintf("keep-%d", i/2%10)
		if i%2 == 1 {
			stream = fmt.Sprintf("drop-%d", i%25)
		}
		batch = append(batch, eslog.AppendRequest{Stream: stream, Expected: eslog.Any, Events: []eslog.ProposedEvent{e}})
		if len(batch) == 200 {
			_, errs := s.AppendAll(ctx, batch)
			for _, err := range errs {
				require.NoError(t, err)
			}
			batch = batch[:0]
		}
	}
	for i := range 25 {
		_, err := s.Tombstone(ctx, fmt.Sprintf("drop-%d", i), eslog.Any)
		require.NoError(t, err)
	}
	before := readAllEvents(t, s)
	res, err := s.Scavenge(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.SegmentsRewritten, 8)

	kept := func(evs []allEvent) []allEvent {
		var out []allEvent
		for _, e := range evs {
			if strings.HasPrefix(e.key, "keep-") {
				out = append(out, e)
			}
		}
		return out
	}
	var sample []allEvent
	for i := 0; i < len(before); i += 7 {
		sample = append(sample, before[i])
	}
	readEverything := func(s *eslog.Store, when string) []allEvent {
		t.Helper()
		got := readAllEvents(t, s)
		require.Equal(t, kept(before), kept(got), "%s: every kept event at its position", when)
		checkReadsFromEveryPosition(t, s, got, startsAround(sample), when)
		for k := range 10 {
			stream := fmt.Sprintf("keep-%d", k)
			page, err := s.ReadStream(stream, eslog.Forwards, 0, false, 1000)
			require.NoError(t, err, when)
			require.Equal(t, 300, len(page.Events), "%s: %s", when, stream)
			for i, e := range page.Events {
				require.EqualValues(t, i, e.Revision, "%s: %s", when, stream)
			}
			page, err = s.ReadStream(stream, eslog.Backwards, 0, true, 1)
			require.NoError(t, err, when)
			require.Len(t, page.Events, 1, when)
			assert.EqualValues(t, 299, page.Events[0].Revision, "%s: %s", when, stream)
			_, err = s.ReadStream(fmt.Sprintf("drop-%d", k), eslog.Forwards, 0, false, 1000)
			assert.ErrorIs(t, err, eslog.ErrStreamDeleted, when)
		}
		return got
	}
	withinBudget := func(s *eslog.Store, when string) {
		t.Helper()
		st := s.Stats()
		t.Logf("%s: the cache holds %d maps, %d runs, %d bytes", when, st.CompactMaps, st.CompactMapRuns, st.CompactMapBytes)
		assert.LessOrEqual(t, st.CompactMapBytes, int64(budget), when)
		assert.Positive(t, st.CompactMaps, "%s: the cache is used", when)
		assert.Less(t, st.CompactMaps, res.SegmentsRewritten/2, when)
	}

	got := readEverything(s, "after scavenge")
	withinBudget(s, "after scavenge")
	require.NoError(t, s.Close())

	// The same reads with every map held.
	full := opts
	full.CompactMapCacheBytes = 1 << 30
	s, err = eslog.Open(full)
	require.NoError(t, err)
	assert.Equal(t, got, readEverything(s, "holding every map"))
	all := s.Stats()
	t.Logf("holding every map: %d maps, %d runs, %d bytes", all.CompactMaps, all.CompactMapRuns, all.CompactMapBytes)
	assert.Equal(t, res.SegmentsRewritten, all.CompactMaps)
	assert.Greater(t, all.CompactMapBytes, int64(2*budget), "the maps take several times the budget")
	require.NoError(t, s.Close())

	s, err = eslog.Open(opts)
	require.NoError(t, err)
	defer s.Close()
	assert.LessOrEqual(t, s.Stats().CompactMapBytes, int64(budget), "open keeps at most the budget")
	assert.Equal(t, got, readEverything(s, "after a restart"))
	withinBudget(s, "after a restart")
}

// TestCompactMapCacheBudgetIsValidated: a negative budget is refused.
func TestCompactMapCacheBudgetIsValidated(t *testing.T) {
	opts := scavengeOpts(t.TempDir())
	opts.CompactMapCacheBytes = -1
	_, err := eslog.Open(opts)
	assert.ErrorIs(t, err, eslog.ErrInvalidRequest)
}
