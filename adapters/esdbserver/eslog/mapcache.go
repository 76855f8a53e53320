package eslog

import (
	"container/list"
	"os"
	"sync"
)

// mapCache keeps the position maps of the compacted segments read most
// recently, whole, up to a budget in bytes, so that memory does not grow
// with the number of runs scavenge ever kept. A map is loaded from its file
// on a miss; a map larger than the budget is used by the read that loaded
// it and not kept. A reader keeps the map it took for as long as it needs
// it: eviction only drops the cache's reference.
//
// Entries are keyed by segment and remember the file they were read from:
// scavenge replaces a segment's file and its map together (see swap), so
// an entry for another file than the segment's is stale and never used.
// Lock order: segmentLog.mu, then mapCache.mu.
type mapCache struct {
	mu     sync.Mutex
	budget int64
	held   int64
	runs   int64
	order  *list.List // of *mapEntry, most recently used first
	items  map[*segment]*list.Element
}

type mapEntry struct {
	seg *segment
	// file is the segment file the map describes.
	file  *os.File
	m     *compactMap
	bytes int64
}

// mapEntryOverhead approximates what an entry costs besides its runs: the
// list element, the map slot, the entry and the map's header.
const mapEntryOverhead = 160

// mapBytes is what the cache counts for m.
func mapBytes(m *compactMap) int64 {
	return mapEntryOverhead + int64(len(m.runs))*int64(compactRunBytes)
}

// compactRunBytes is the size of a compactRun in memory.
const compactRunBytes = 24

func newMapCache(budget int64) *mapCache {
	return &mapCache{budget: budget, order: list.New(), items: map[*segment]*list.Element{}}
}

// get returns the cached map of seg's file f, or nil.
func (c *mapCache) get(seg *segment, f *os.File) *compactMap {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[seg]
	if !ok {
		return nil
	}
	e := el.Value.(*mapEntry)
	if e.file != f {
		return nil
	}
	c.order.MoveToFront(el)
	return e.m
}

// put keeps m as the map of seg's file f, if it fits in the budget, and
// evicts the least recently used maps until the cache is within it.
func (c *mapCache) put(seg *segment, f *os.File, m *compactMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(seg)
	n := mapBytes(m)
	if n > c.budget {
		return
	}
	c.items[seg] = c.order.PushFront(&mapEntry{seg: seg, file: f, m: m, bytes: n})
	c.held += n
	c.runs += int64(len(m.runs))
	for c.held > c.budget {
		c.removeLocked(c.order.Back().Value.(*mapEntry).seg)
	}
}

// drop forgets seg's map, whatever file it was read from.
func (c *mapCache) drop(seg *segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(seg)
}

func (c *mapCache) removeLocked(seg *segment) {
	el, ok := c.items[seg]
	if !ok {
		return
	}
	e := el.Value.(*mapEntry)
	c.order.Remove(el)
	delete(c.items, seg)
	c.held -= e.bytes
	c.runs -= int64(len(e.m.runs))
}

// stats returns how many maps, runs and bytes the cache holds.
func (c *mapCache) stats() (maps int, runs, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len(), c.runs, c.held
}
