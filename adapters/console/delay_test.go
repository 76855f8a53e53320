package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/console"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections"
)

// TestTimelineShowsADelayWaitingUntilItsTime: a delay step's lane has a
// mark where it started and a line to the time it waits until, which
// stretches the timeline past the history so far.
func TestTimelineShowsADelayWaitingUntilItsTime(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	until := t0.Add(10 * time.Minute)
	rows := []projections.AuditRow{
		{Event: domain.TaskSubmittedType, Time: t0},
		{Event: domain.StepDelayedType, Step: "cool-off", Time: t0.Add(time.Second), NotBefore: &until, Details: "waiting until 2026-11-21T10:10:00Z"},
	}
	tl := console.BuildTimeline(rows)
	require.Len(t, tl.Lanes, 2)
	lane := tl.Lanes[1]
	assert.Equal(t, "cool-off", lane.Step)
	require.Len(t, lane.Marks, 1)
	assert.Equal(t, "delay", lane.Marks[0].Kind)
	assert.True(t, tl.End.Equal(until), "the timeline reaches the time the delay waits until")
	svg := string(tl.SVG())
	assert.Equal(t, 1, strings.Count(svg, `class="mark delay"`))
	assert.Contains(t, svg, "waiting until +10m0s")
}
