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

// TestTimelineShowsParallelAndSkippedSteps: two steps in flight at once
// get a lane each, their bars overlapping in time; a skipped step has a
// lane that says so.
func TestTimelineShowsParallelAndSkippedSteps(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	rows := []projections.AuditRow{
		{Event: domain.TaskSubmittedType, Time: ms(0)},
		{Event: domain.StepSkippedType, Step: "newsletter", Time: ms(0), Details: "skipped: condition order.marketing == true is false"},
		{Event: domain.StepDispatchedType, Step: "storage", Attempt: 1, Time: ms(1)},
		{Event: domain.StepDispatchedType, Step: "email", Attempt: 1, Time: ms(1)},
		{Event: domain.StepSucceededType, Step: "email", Attempt: 1, Time: ms(5)},
		{Event: domain.StepSucceededType, Step: "storage", Attempt: 1, Time: ms(8)},
	}
	tl := console.BuildTimeline(rows)
	lanes := map[string]*console.Lane{}
	for _, l := range tl.Lanes {
		lanes[l.Step] = l
	}
	require.Len(t, lanes["storage"].Bars, 1)
	require.Len(t, lanes["email"].Bars, 1)
	storage, email := lanes["storage"].Bars[0], lanes["email"].Bars[0]
	assert.True(t, storage.From.Before(email.To) && email.From.Before(storage.To), "the two bars overlap")
	assert.True(t, lanes["newsletter"].Skipped)
	assert.Empty(t, lanes["newsletter"].Bars)
	svg := string(tl.SVG())
	assert.Contains(t, svg, "newsletter (skipped)")
	assert.Equal(t, 1, strings.Count(svg, `class="mark skipped"`))
}
