package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/console"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections/audittest"
)

// expiredTask is o-1 as the task view keeps it, with what the event store
// has left of its history.
type expiredTask struct {
	oneTask
	left []domain.RecordedEvent
}

func (e expiredTask) ReadStream(context.Context, string) ([]domain.RecordedEvent, error) {
	return e.left, nil
}

// TestTaskPageSaysTheHistoryExpired: the page of a finished task whose
// events expired (none left, or only the last ones) shows the task as the
// view keeps it and says that its history has expired.
func TestTaskPageSaysTheHistoryExpired(t *testing.T) {
	history := audittest.History()
	for name, left := range map[string][]domain.RecordedEvent{"all expired": nil, "the start expired": history[len(history)-2:]} {
		tasks := expiredTask{newOneTask(t), left}
		srv := httptest.NewServer(console.Handler(console.Config{Tasks: tasks, History: tasks}))
		code, body := get(t, srv.Client(), srv.URL+"/ui/tasks/o-1")
		srv.Close()
		require.Equal(t, http.StatusOK, code, name)
		assert.Contains(t, body, "the event history has expired", name)
		assert.Contains(t, body, "Compensated", name)
	}
}
