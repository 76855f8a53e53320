package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
)

// TestGetShowsSkippedStepsAndTheFailedStep: sagactl get shows a skipped
// step as Skipped, a succeeded one as Processed, and names the step whose
// failure compensated the task.
func TestGetShowsSkippedStepsAndTheFailedStep(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/refuse") {
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	t.Cleanup(srv.Close)
	w, err := domain.ParseDefinition([]byte(`{"name":"graph","defaults":{"budget":"5s","attempts":1},"steps":[
		{"name":"open","http":{"url":"` + srv.URL + `/open"},"compensation":{"http":{"url":"` + srv.URL + `/close"}}},
		{"name":"maybe","after":[],"when":"order.extra == true","http":{"url":"` + srv.URL + `/maybe"}},
		{"name":"refused","after":["open"],"http":{"url":"` + srv.URL + `/refuse"}}]}`))
	require.NoError(t, err)
	s := startSaga(t, engine.Config{Workflows: append(testWorkflows(5e9), w)})
	_, _, code := s.run("submit", "graph-1", "--workflow", "graph", "--wait", "--timeout", "30s")
	assert.Equal(t, exitCompensated, code)
	s.awaitStates(map[string]domain.TaskState{"graph-1": domain.StateCompensated})
	out, errOut, code := s.run("get", "graph-1")
	require.Zero(t, code, errOut)
	assert.Contains(t, out, "failed step: refused")
	lines := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 {
			lines[f[0]] = f[2]
		}
	}
	assert.Equal(t, "Skipped", lines["maybe"], out)
	assert.Equal(t, "Compensated", lines["open"], out)
	assert.Equal(t, "Error", lines["refused"], out)
}
