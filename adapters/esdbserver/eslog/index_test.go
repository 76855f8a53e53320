package eslog_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// indexModel is what the store must answer, kept in memory by the test.
type indexModel struct {
	streams    map[string][][16]byte
	tombstoned map[string]bool
	all        [][16]byte
}

// TestIndexOnDiskMatchesModel runs a random mix of appends, tombstones,
// metadata and reopens against a store whose memtable holds five entries
// and whose cache holds two streams, so that nearly every lookup goes to
// index tables on disk, tables are merged all the time and every reopen
// starts from a checkpoint. With the weak hash most streams share a hash.
func TestIndexOnDiskMatchesModel(t *testing.T) {
	for _, weak := range []bool{false, true} {
		t.Run(fmt.Sprintf("weak hash %v", weak), func(t *testing.T) {
			if weak {
				eslog.WeakHash(t)
			}
			dir := t.TempDir()
			opts := eslog.Options{Dir: dir, SegmentSize: 8 << 10, IndexMemtableEntries: 5, IndexCacheStreams: 2}
			s, err := eslog.Open(opts)
			require.NoError(t, err)
			defer func() { _ = s.Close() }()
			m := indexModel{streams: map[string][][16]byte{}, tombstoned: map[string]bool{}}
			rng := rand.New(rand.NewPCG(1, uint64(len(t.Name()))))
			var names []string
			for i := range 24 {
				names = append(names, fmt.Sprintf("s%s%d", strings.Repeat("x", i%5), i))
			}
			ctx := context.Background()
			var next uint32
			newEvent := func() eslog.ProposedEvent {
				next++
				e := ev(0)
				e.ID = [16]byte{byte(next), byte(next >> 8), byte(next >> 16), 0xee}
				return e
			}
			for step := range 1500 {
				name := names[rng.IntN(len(names))]
				last := int64(len(m.streams[name])) - 1
				switch op := rng.IntN(100); {
				case op < 80:
					var evs []eslog.ProposedEvent
					for range 1 + rng.IntN(3) {
						evs = append(evs, newEvent())
					}
					exp := eslog.Revision(uint64(last))
					if last < 0 {
						exp = eslog.NoStreamExpected
					}
					res, err := s.Append(ctx, name, exp, evs)
					if m.tombstoned[name] {
						require.ErrorIs(t, err, eslog.ErrStreamDeleted)
						continue
					}
					require.NoError(t, err, "step %d", step)
					for _, e := range evs {
						m.streams[name] = append(m.streams[name], e.ID)
						m.all = append(m.all, e.ID)
					}
					assert.Equal(t, int64(len(m.streams[name])-1), res.Revision)
					// A retry with the same ids is recognised.
					again, err := s.Append(ctx, name, eslog.Any, evs)
					require.NoError(t, err)
					assert.Equal(t, res, again)
					// A stale expectation conflicts, naming the current revision.
					if last >= 0 {
						_, err = s.Append(ctx, name, eslog.Revision(uint64(last)), []eslog.ProposedEvent{newEvent()})
						var wrong *eslog.WrongExpectedVersionError
						require.ErrorAs(t, err, &wrong)
						assert.Equal(t, res.Revision, wrong.Current)
					}
				case op < 83:
					_, err := s.Tombstone(ctx, name, eslog.Any)
					if m.tombstoned[name] {
						require.ErrorIs(t, err, eslog.ErrStreamDeleted)
					} else {
						require.NoError(t, err)
					}
					m.tombstoned[name] = true
				case op < 88:
					meta := newEvent()
					meta.Type = eslog.MetadataEventType
					meta.Data = []byte(`{"$maxCount":2}`)
					_, err := s.Append(ctx, eslog.MetadataStreamOf(name), eslog.Any, []eslog.ProposedEvent{meta})
					require.NoError(t, err)
					ms := eslog.MetadataStreamOf(name)
					m.streams[ms] = append(m.streams[ms], meta.ID)
					m.all = append(m.all, meta.ID)
				case op < 90:
					require.NoError(t, s.Close())
					s, err = eslog.Open(opts)
					require.NoError(t, err)
				default:
					checkStream(t, s, &m, name)
				}
			}
			check := func() {
				for _, name := range names {
					checkStream(t, s, &m, name)
				}
				page, err := s.ReadAll(eslog.Forwards, eslog.AllFrom{}, len(m.all)+1, 0, nil)
				require.NoError(t, err)
				assert.Equal(t, m.all, ids(page.Events))
				assert.True(t, page.End)
				page, err = s.ReadAll(eslog.Backwards, eslog.AllFrom{FromEnd: true}, len(m.all)+1, 0, nil)
				require.NoError(t, err)
				back := ids(page.Events)
				for i, j := 0, len(back)-1; i < j; i, j = i+1, j-1 {
					back[i], back[j] = back[j], back[i]
				}
				assert.Equal(t, m.all, back)
				// From a position in the middle, both ways.
				mid := len(m.all) / 2
				all, err := s.ReadAll(eslog.Forwards, eslog.AllFrom{}, len(m.all), 0, nil)
				require.NoError(t, err)
				page, err = s.ReadAll(eslog.Forwards, eslog.AllFrom{Position: all.Events[mid].Position}, 3, 0, nil)
				require.NoError(t, err)
				assert.Equal(t, m.all[mid:mid+3], ids(page.Events))
				page, err = s.ReadAll(eslog.Backwards, eslog.AllFrom{Position: all.Events[mid].Position}, 2, 0, nil)
				require.NoError(t, err)
				assert.Equal(t, [][16]byte{m.all[mid-1], m.all[mid-2]}, ids(page.Events))
			}
			check()
			tables, _ := eslog.IndexFiles(s)
			assert.Positive(t, tables, "entries went to tables")
			require.NoError(t, s.Close())
			s, err = eslog.Open(opts)
			require.NoError(t, err)
			check()
		})
	}
}

func checkStream(t *testing.T, s *eslog.Store, m *indexModel, name string) {
	t.Helper()
	want := m.streams[name]
	page, err := s.ReadStream(name, eslog.Forwards, 0, false, len(want)+1)
	switch {
	case m.tombstoned[name]:
		require.ErrorIs(t, err, eslog.ErrStreamDeleted, name)
		return
	case len(want) == 0:
		require.ErrorIs(t, err, eslog.ErrStreamNotFound, name)
		return
	}
	require.NoError(t, err, name)
	if len(m.streams[eslog.MetadataStreamOf(name)]) > 0 {
		want = want[max(0, len(want)-2):] // $maxCount 2
	}
	assert.Equal(t, want, ids(page.Events), name)
	assert.Equal(t, int64(len(m.streams[name])-1), s.StreamRevision(name), name)
	page, err = s.ReadStream(name, eslog.Backwards, 0, true, 1)
	require.NoError(t, err)
	require.Len(t, page.Events, 1)
	assert.Equal(t, want[len(want)-1], page.Events[0].ID)
}

func ids(evs []eslog.RecordedEvent) [][16]byte {
	out := make([][16]byte, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}
