package domain

import (
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// Priority is how urgent a task is: its commands go to the agent's band of
// that priority (protocol.CommandTopicFor), agents take higher bands first,
// and the scheduler releases retries falling due at the same moment in
// priority order. There are three bands on purpose: an agent can prefer
// a band only if there are few of them, and any Kafka client must be able
// to do the same (docs/protocol.md).
type Priority string

// The priorities, highest first. The zero value reads as PriorityNormal,
// so that tasks recorded before priorities run as normal.
const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal"
	PriorityLow    Priority = "low"
)

// Priorities lists the priorities, highest first.
func Priorities() []Priority { return []Priority{PriorityHigh, PriorityNormal, PriorityLow} }

// DefaultPriorityField is where a message's priority is read when its
// workflow's trigger names no PriorityField.
const DefaultPriorityField = "/priority"

// DefaultPriorityAging is how long a command waits at an agent before it
// is taken as if it had the next higher priority (AgedRank).
const DefaultPriorityAging = 2 * time.Second

// ErrInvalidPriority is returned for a priority that is not high, normal
// or low.
var ErrInvalidPriority = errors.New("invalid priority")

// ParsePriority accepts high, normal or low; empty is normal. Numbers are
// refused: a scale of 0-9 would promise a precision three bands cannot
// keep, and whether 0 or 9 is urgent differs from one system to the next.
func ParsePriority(s string) (Priority, error) {
	switch p := Priority(s); p {
	case "":
		return PriorityNormal, nil
	case PriorityHigh, PriorityNormal, PriorityLow:
		return p, nil
	}
	return "", errors.Wrapf(ErrInvalidPriority, "priority %q is not high, normal or low", truncate(s))
}

// OrNormal returns p, or PriorityNormal when p is empty (tasks and events
// recorded before priorities).
func (p Priority) OrNormal() Priority {
	if p == "" {
		return PriorityNormal
	}
	return p
}

// Rank orders the priorities: 0 for high, 1 for normal, 2 for low; lower
// goes first.
func (p Priority) Rank() int {
	switch p.OrNormal() {
	case PriorityHigh:
		return 0
	case PriorityLow:
		return 2
	}
	return 1
}

// AgedRank is the rank a command of priority p competes with after waiting
// for waited: every full aging interval raises it one band, up to high. A
// low command waiting one interval competes as normal, two as high, so
// that no band starves however much higher work arrives; among commands of
// equal aged rank the one waiting longest goes first. aging <= 0 means
// DefaultPriorityAging.
func AgedRank(p Priority, waited, aging time.Duration) int {
	if aging <= 0 {
		aging = DefaultPriorityAging
	}
	rank := p.Rank()
	if waited > 0 {
		rank -= int(min(waited/aging, 2))
	}
	return max(rank, 0)
}

// recorded is p as TaskSubmitted records it: empty for normal, so that a
// normal task's events are what they were before priorities.
func (p Priority) recorded() Priority {
	if p == PriorityNormal {
		return ""
	}
	return p
}

// bandSuffix reports whether an agent name ends like a priority band's
// command topic (saga.cmd.<agent>.high, .low), which would make its
// normal topic another agent's band.
func bandSuffix(agent string) bool {
	return strings.HasSuffix(agent, "."+string(PriorityHigh)) || strings.HasSuffix(agent, "."+string(PriorityLow))
}
