package processes_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// readCounter counts the streams a registry reads.
type readCounter struct {
	processes.EventStore
	catalog, workflows atomic.Int64
}

func (r *readCounter) ReadStream(ctx context.Context, stream string) ([]domain.RecordedEvent, error) {
	if stream == domain.WorkflowCatalogStream {
		r.catalog.Add(1)
	} else {
		r.workflows.Add(1)
	}
	return r.EventStore.ReadStream(ctx, stream)
}

// TestRegistryRefreshReadsTheCatalogNotEveryWorkflow: with many workflows,
// a refresh reads the catalog once and only the streams of workflows that
// got a new version, and another instance sees a new version within one
// refresh.
func TestRegistryRefreshReadsTheCatalogNotEveryWorkflow(t *testing.T) {
	ctx := context.Background()
	store := embeddedStore(t)
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	clock := processes.ClockFunc(func() time.Time { return now })
	writer := processes.NewRegistry(store, clock)
	step := domain.StepDefinition{Name: "a", Agent: "x", Budget: time.Second, MaxAttempts: 1}
	for i := range 30 {
		_, _, err := writer.Apply(ctx, &domain.Workflow{Name: fmt.Sprintf("w%02d", i), Steps: []domain.StepDefinition{step}}, "test")
		require.NoError(t, err)
	}
	counter := &readCounter{EventStore: store}
	reader := processes.NewRegistry(counter, clock)
	all, err := reader.List(ctx)
	require.NoError(t, err)
	require.Len(t, all, 30)
	counter.catalog.Store(0)
	counter.workflows.Store(0)

	for range 5 { // five refreshes with nothing new: one catalog read each
		now = now.Add(processes.DefaultWorkflowRefresh + time.Millisecond)
		_, err := reader.List(ctx)
		require.NoError(t, err)
	}
	assert.EqualValues(t, 5, counter.catalog.Load())
	assert.Zero(t, counter.workflows.Load(), "no workflow stream is read again while the catalog says nothing changed")

	changed := &domain.Workflow{Name: "w07", Steps: []domain.StepDefinition{step, {Name: "b", Agent: "x", Budget: time.Second, MaxAttempts: 1}}}
	_, _, err = writer.Apply(ctx, changed, "test")
	require.NoError(t, err)
	now = now.Add(processes.DefaultWorkflowRefresh + time.Millisecond)
	w, err := reader.Workflow(ctx, "w07", 0)
	require.NoError(t, err)
	assert.Equal(t, 2, w.Version, "the other instance sees the new version within one refresh")
	assert.EqualValues(t, 1, counter.workflows.Load(), "only the changed workflow's stream was read")
}
