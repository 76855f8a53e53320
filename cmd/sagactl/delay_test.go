package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
)

// TestGetShowsADelayWaitingUntilItsTime: sagactl get shows a delay step
// that waits as Delayed, and the time it waits until.
func TestGetShowsADelayWaitingUntilItsTime(t *testing.T) {
	w, err := domain.ParseDefinition([]byte(`{"name":"cool","steps":[
		{"name":"cool-off","delay":{"for":"1h"}},
		{"name":"later","agent":"payments"}]}`))
	require.NoError(t, err)
	s := startSaga(t, engine.Config{Workflows: append(testWorkflows(5e9), w)})
	_, errOut, code := s.run("submit", "cool-1", "--workflow", "cool")
	require.Zero(t, code, errOut)
	require.Eventually(t, func() bool {
		v, ok, err := s.app.Tasks.Get(context.Background(), "cool-1")
		return err == nil && ok && len(v.Steps) > 0 && v.Steps[0].State == domain.StepStateDelayed
	}, 30*time.Second, 20*time.Millisecond)
	out, errOut, code := s.run("get", "cool-1")
	require.Zero(t, code, errOut)
	lines := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 {
			lines[f[0]] = f[2]
		}
	}
	assert.Equal(t, "Delayed", lines["cool-off"], out)
	assert.Equal(t, "Pending", lines["later"], out)
	assert.Contains(t, out, "cool-off: waiting until 20", out)
}
