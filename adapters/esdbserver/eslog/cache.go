package eslog

import (
	"container/list"
	"sync"
)

// stateCache keeps the states of the most recently used streams, up to a
// fixed number. It has a lock of its own because readers fill it while
// holding only the store's read lock; states are changed only by the writer
// under the store's write lock.
type stateCache struct {
	mu    sync.Mutex
	max   int
	order *list.List
	items map[string]*list.Element
}

func newStateCache(max int) *stateCache {
	return &stateCache{max: max, order: list.New(), items: map[string]*list.Element{}}
}

func (c *stateCache) get(name string) *streamState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[name]; ok {
		c.order.MoveToFront(el)
		return el.Value.(*streamState)
	}
	return nil
}

func (c *stateCache) put(st *streamState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[st.name]; ok {
		el.Value = st
		c.order.MoveToFront(el)
		return
	}
	c.items[st.name] = c.order.PushFront(st)
	for c.order.Len() > c.max {
		el := c.order.Back()
		c.order.Remove(el)
		delete(c.items, el.Value.(*streamState).name)
	}
}

// len is how many stream states the cache holds.
func (c *stateCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
