package domain_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

func recorded(t *testing.T, rev uint64, e domain.Event) domain.RecordedEvent {
	data, err := domain.EncodeEvent(e)
	require.NoError(t, err)
	return domain.RecordedEvent{Stream: domain.TaskStream("t1"), Type: e.EventType(), Data: data, Revision: rev}
}

// TestFoldRecordedStopsAtAnUnreadableEvent: given stored events, the fold
// applies them in order, skips nothing, and stops at the first it cannot
// read or that leaves a gap.
func TestFoldRecordedStopsAtAnUnreadableEvent(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	submitted := recorded(t, 0, domain.TaskSubmitted{TaskID: "t1", Workflow: "w", WorkflowVersion: 1, Steps: []string{"a"}, Order: json.RawMessage(`{}`), SubmittedAt: now})
	processed := recorded(t, 1, domain.TaskProcessed{TaskID: "t1", At: now})
	unknown := domain.RecordedEvent{Stream: domain.TaskStream("t1"), Type: "FromTheFuture", Data: []byte(`{}`), Revision: 1}
	for _, tc := range []struct {
		name     string
		events   []domain.RecordedEvent
		revision int64
		err      error
	}{
		{"all readable", []domain.RecordedEvent{submitted, processed}, 1, nil},
		{"unreadable second", []domain.RecordedEvent{submitted, unknown}, 0, domain.ErrUnreadableEvent},
		{"a gap", []domain.RecordedEvent{submitted, recorded(t, 2, domain.TaskProcessed{TaskID: "t1", At: now})}, 0, domain.ErrRevisionGap},
		{"a repeat changes nothing", []domain.RecordedEvent{submitted, submitted, processed}, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task, err := domain.FoldRecorded("t1", tc.events)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.revision, task.Revision)
		})
	}
}
