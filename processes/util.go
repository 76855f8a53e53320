package processes

import (
	"strconv"
	"time"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes/port"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// DefaultBackoff spaces a consumer's redeliveries (port.DefaultBackoff).
var DefaultBackoff = port.DefaultBackoff

// timed is something due at a time.
type timed interface{ dueAt() time.Time }

// dueHeap orders items by when they fall due, earliest first (a
// container/heap). Entries that went stale stay until they surface; their
// owners check them then.
type dueHeap[T timed] []T

func (h dueHeap[T]) Len() int           { return len(h) }
func (h dueHeap[T]) Less(i, j int) bool { return h[i].dueAt().Before(h[j].dueAt()) }
func (h dueHeap[T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap[T]) Push(x any)        { *h = append(*h, x.(T)) }
func (h *dueHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// toNewEvents encodes decided events for an append, each with meta.
func toNewEvents(events []domain.Event, meta domain.EventMetadata) ([]domain.NewEvent, error) {
	batch := make([]domain.NewEvent, len(events))
	for i, e := range events {
		data, err := domain.EncodeEvent(e)
		if err != nil {
			return nil, err
		}
		batch[i] = domain.NewEvent{Type: e.EventType(), Data: data, Metadata: meta}
	}
	return batch, nil
}
