package eslog

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTableFiltersStayOutOfTheHeap: a table's fence and Bloom filter grow
// with history (16 bytes per 170 entries, 10 bits a stream) and nothing
// removes them, so they are mapped from the table's file rather than copied
// into Go's heap, where they would eat the memory limit month after month.
// An open table of a million streams holds no more of the heap than one of
// a hundred thousand, and its lookups are answered from the mapping.
func TestTableFiltersStayOutOfTheHeap(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no mmap here: the fence and filter are read into memory")
	}
	dir := t.TempDir()
	hashOfEntry := func(i int) uint64 { return uint64(i+1) << 20 }
	open := func(seq uint64, n int) (*table, uint64) {
		entries := make([]ientry, n)
		for i := range entries {
			entries[i] = ientry{h: hashOfEntry(i), rev: 0, pos: uint64(i)}
		}
		written, err := writeTable(dir, seq, sliceIterator(entries))
		require.NoError(t, err)
		require.NoError(t, written.close())
		entries = nil
		before := heapAlloc()
		tab, err := openTable(dir, seq, n)
		require.NoError(t, err)
		after := heapAlloc()
		held := uint64(0)
		if after > before {
			held = after - before
		}
		return tab, held
	}
	small, heldSmall := open(1, 100_000)
	defer small.close()
	big, heldBig := open(2, 1_000_000)
	defer big.close()
	meta := uint64(len(big.fence) + len(big.bloom))
	t.Logf("fence and filter: %d KiB for a million streams; heap held by an open table: %d KiB (100,000 streams), %d KiB (a million)",
		meta>>10, heldSmall>>10, heldBig>>10)
	require.Greater(t, meta, uint64(1<<20), "the big table's fence and filter are over a MiB")
	require.Less(t, heldBig, meta/4, "the fence and filter are not in the heap")
	require.Less(t, heldBig, heldSmall+256<<10, "a table ten times bigger holds no more heap")

	// Lookups read the mapping: every stream of the table is in its
	// filter and found by its fence; streams it lacks are almost never.
	for _, i := range []int{0, 1, 169, 170, 171, 499_999, 999_999} {
		h := hashOfEntry(i)
		require.True(t, big.mayContain(h), "entry %d", i)
		at, block, err := big.seek(ientry{h: h})
		require.NoError(t, err)
		require.Equal(t, i, at)
		require.Equal(t, h, block[0].h)
	}
	falsePositives := 0
	for i := range 10_000 {
		if big.mayContain(hashOfEntry(i) + 1) {
			falsePositives++
		}
	}
	require.Less(t, falsePositives, 200, "false positives of a 10-bit, 7-probe filter are about 1 %%")

	// A closed table answers an error, never touches the unmapped memory.
	require.NoError(t, small.close())
	require.True(t, small.mayContain(hashOfEntry(3)))
	_, _, err := small.seek(ientry{h: hashOfEntry(3)})
	require.ErrorIs(t, err, errTableClosed)
}

// heapAlloc is the heap in use after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
