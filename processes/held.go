package processes

import (
	"maps"
	"slices"
)

// Held counts what a process holds in memory, by structure (tasks,
// deadlines, ...). A process's held structures are bounded by the work in
// flight and by fixed caps, never by the number of finished tasks: tests
// compare them after N and 10N orders, and /metrics exports them
// (saga_held_entries) so that an operator sees a leak as a slope.
type Held map[string]int

// Structures returns the names in h, sorted.
func (h Held) Structures() []string { return slices.Sorted(maps.Keys(h)) }
