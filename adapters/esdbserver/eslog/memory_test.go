package eslog_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// TestMemoryAfterOpenIsBounded writes events over many streams, then shows
// that a new open of the store needs little heap and replays only the log
// after the index checkpoint. It writes 100,000 events over 30,000 streams;
// SAGA_INDEX_EVENTS=1000000 writes a million over 300,000 streams (about 10
// s and 250 MB of disk).
func TestMemoryAfterOpenIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a big log")
	}
	events := 100_000
	if v, err := strconv.Atoi(os.Getenv("SAGA_INDEX_EVENTS")); err == nil && v > 0 {
		events = v
	}
	streams := events * 3 / 10
	dir := t.TempDir()
	s, err := eslog.Open(eslog.Options{Dir: dir})
	require.NoError(t, err)
	start := time.Now()
	var batch []eslog.AppendRequest
	for i := range events {
		e := ev(0)
		e.ID = [16]byte{byte(i), byte(i >> 8), byte(i >> 16), byte(i >> 24), 0xab}
		e.Data = []byte(`{"orderId":"order-0000000","amount":42,"sku":"sku-1"}`)
		batch = append(batch, eslog.AppendRequest{Stream: fmt.Sprintf("task-%08d", i%streams), Expected: eslog.Any, Events: []eslog.ProposedEvent{e}})
		if len(batch) == 20_000 || i == events-1 {
			_, errs := s.AppendAll(context.Background(), batch)
			for _, err := range errs {
				require.NoError(t, err)
			}
			batch = batch[:0]
		}
	}
	require.NoError(t, s.Close())
	t.Logf("wrote %d events over %d streams in %s, log %d MiB", events, streams, time.Since(start).Round(time.Millisecond), logBytes(t, dir)>>20)

	batch = nil
	before := heapInUse()
	start = time.Now()
	s, err = eslog.Open(eslog.Options{Dir: dir})
	require.NoError(t, err)
	defer s.Close()
	took := time.Since(start)
	after := heapInUse()
	st := s.Stats()
	t.Logf("open took %s, replayed %d KiB of %d MiB, %d tables; heap in use %.1f MiB before, %.1f MiB after",
		took.Round(time.Millisecond), st.Replayed>>10, logBytes(t, dir)>>20, st.IndexTables, mib(before), mib(after))
	assert.Less(t, mib(after)-mib(before), 64.0, "heap held by an open store, its state cache included")
	// The default memtable holds 131,072 entries; open replays the active
	// one and at most one being flushed, whatever the history's length.
	assert.Less(t, st.Replayed, uint64(2*131_072*200), "open replays only the log after the checkpoint")

	// Reads of a cold stream and of $all work from the index on disk.
	cold := fmt.Sprintf("task-%08d", streams-1)
	n := (events-streams)/streams + 1
	page, err := s.ReadStream(cold, eslog.Forwards, 0, false, 100)
	require.NoError(t, err)
	assert.Len(t, page.Events, n)
	all, err := s.ReadAll(eslog.Backwards, eslog.AllFrom{FromEnd: true}, 10, 0, nil)
	require.NoError(t, err)
	assert.Len(t, all.Events, 10)
	res, err := s.Append(context.Background(), cold, eslog.Revision(uint64(n-1)), []eslog.ProposedEvent{ev(1)})
	require.NoError(t, err, "an expected revision is checked against a cold stream")
	assert.Equal(t, int64(n), res.Revision)
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
