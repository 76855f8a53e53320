package eslog_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// fill appends n events of size bytes of data each to stream, 100 per append.
func fill(t *testing.T, s *eslog.Store, stream string, n, size int) {
	t.Helper()
	for done := 0; done < n; {
		var batch []eslog.ProposedEvent
		for ; done < n && len(batch) < 100; done++ {
			e := ev(0)
			e.ID[0], e.ID[1], e.ID[2] = byte(done), byte(done>>8), byte(done>>16)
			e.Data = make([]byte, size)
			batch = append(batch, e)
		}
		_, err := s.Append(context.Background(), stream, eslog.Any, batch)
		require.NoError(t, err)
	}
}

func openBig(t *testing.T) *eslog.Store {
	t.Helper()
	s, err := eslog.Open(eslog.Options{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestReadAllExamineLimit stops a filtered read that finds nothing after the
// examine limit, with its place so the next page goes on from there.
func TestReadAllExamineLimit(t *testing.T) {
	s := openBig(t)
	fill(t, s, "a", 3000, 1)
	none := &eslog.Filter{Prefixes: []string{"zzz"}}
	lim := eslog.ReadLimits{Events: 10, Examine: 1100}
	page, err := s.ReadAllContext(context.Background(), eslog.Forwards, eslog.AllFrom{}, lim, none)
	require.NoError(t, err)
	assert.Empty(t, page.Events)
	assert.Equal(t, 1100, page.Examined)
	assert.False(t, page.End)

	all, err := s.ReadAll(eslog.Forwards, eslog.AllFrom{}, 3000, 0, nil)
	require.NoError(t, err)
	assert.Equal(t, all.Events[1099].Position, page.Last)
	page, err = s.ReadAllContext(context.Background(), eslog.Forwards, eslog.AllFrom{Position: page.Last + 1}, lim, none)
	require.NoError(t, err)
	assert.Equal(t, 1100, page.Examined)
	page, err = s.ReadAllContext(context.Background(), eslog.Forwards, eslog.AllFrom{Position: page.Last + 1}, lim, none)
	require.NoError(t, err)
	assert.Equal(t, 800, page.Examined)
	assert.True(t, page.End)
}

// TestReadPagesAreBoundedByBytes bounds pages of $all and of a stream by
// the events' size, returning one event even when it alone is over.
func TestReadPagesAreBoundedByBytes(t *testing.T) {
	s := openBig(t)
	fill(t, s, "a", 10, 1000)
	ctx := context.Background()
	lim := eslog.ReadLimits{Events: 100, Bytes: 2500}
	var got int
	from := eslog.AllFrom{}
	for {
		page, err := s.ReadAllContext(ctx, eslog.Forwards, from, lim, nil)
		require.NoError(t, err)
		if page.End && len(page.Events) == 0 {
			break
		}
		assert.LessOrEqual(t, len(page.Events), 2, "two events of 1000 bytes fit in 2500, three do not")
		got += len(page.Events)
		from.Position = page.Last + 1
		if page.End {
			break
		}
	}
	assert.Equal(t, 10, got, "paging by bytes loses nothing")

	page, err := s.ReadStreamContext(ctx, "a", eslog.Forwards, 3, false, lim)
	require.NoError(t, err)
	require.Len(t, page.Events, 2)
	assert.Equal(t, uint64(3), page.Events[0].Revision)
	assert.Equal(t, uint64(4), page.Last)

	tiny := eslog.ReadLimits{Events: 100, Bytes: 10}
	page, err = s.ReadStreamContext(ctx, "a", eslog.Backwards, 0, true, tiny)
	require.NoError(t, err)
	assert.Len(t, page.Events, 1, "a page holds at least one event")
	apage, err := s.ReadAllContext(ctx, eslog.Backwards, eslog.AllFrom{FromEnd: true}, tiny, nil)
	require.NoError(t, err)
	assert.Len(t, apage.Events, 1)
}

// cancelAfter is a context that reports Canceled from its n-th Err call on,
// so that a test can cancel a scan in its middle without timing.
type cancelAfter struct {
	context.Context
	calls, n atomic.Int64
}

func (c *cancelAfter) Err() error {
	if c.calls.Add(1) >= c.n.Load() {
		return context.Canceled
	}
	return nil
}

// TestReadAllStopsWhenCancelled cancels a filtered scan in its middle: it
// returns the context's error without examining the rest.
func TestReadAllStopsWhenCancelled(t *testing.T) {
	s := openBig(t)
	fill(t, s, "a", 10_000, 1)
	ctx := &cancelAfter{Context: context.Background()}
	ctx.n.Store(3)
	page, err := s.ReadAllContext(ctx, eslog.Forwards, eslog.AllFrom{}, eslog.ReadLimits{Events: 10}, &eslog.Filter{Prefixes: []string{"zzz"}})
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, page.Examined, 10_000)
	assert.Positive(t, page.Examined, "the scan had started")
}
