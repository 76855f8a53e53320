package integration_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/domain"
)

// TestAPITokensNameWhoActs runs sagad with API tokens: sagactl without a
// token is refused, a viewer's token reads but cannot cancel, and an
// operator's cancel is recorded under the token's identity.
func TestAPITokensNameWhoActs(t *testing.T) {
	dir := t.TempDir()
	viewer, viewerLine, err := httpapi.NewToken("vera", httpapi.RoleViewer)
	require.NoError(t, err)
	operator, operatorLine, err := httpapi.NewToken("otto", httpapi.RoleOperator)
	require.NoError(t, err)
	tokens := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte(viewerLine+"\n"+operatorLine+"\n"), 0o600))
	operatorFile := filepath.Join(dir, "otto.token")
	require.NoError(t, os.WriteFile(operatorFile, []byte(operator+"\n"), 0o600))

	s := startSystem(t, engine.Config{APITokensFile: tokens, Workflows: []*domain.Workflow{fastWorkflow(5 * time.Second)},
		Faults: map[string][]demo.Fault{"shipping": {{Mode: demo.FaultHang, Rate: 1}}}})
	s.publish("auth-1", []byte(`{"orderId":"auth-1"}`))
	s.awaitTasks([]string{"auth-1"}, 30*time.Second, func(t *domain.Task) bool { return t.Step("schedule-shipping").InFlight() })

	out, code := s.sagactl("get", "auth-1")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "401")
	t.Setenv("SAGA_API_TOKEN", viewer)
	out, code = s.sagactl("get", "auth-1")
	assert.Equal(t, 0, code, out)
	out, code = s.sagactl("cancel", "auth-1", "--by", "mallory")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "403")
	out, code = s.sagactl("cancel", "auth-1", "--by", "mallory", "--api-token-file", operatorFile)
	require.Equal(t, 0, code, out)

	task := s.awaitTerminal([]string{"auth-1"}, 30*time.Second)["auth-1"]
	assert.Equal(t, domain.StateCompensated, task.State)
	assert.Equal(t, "otto", task.CancelledBy, "the token's identity, not the --by the caller claimed")
	for _, e := range s.stream("auth-1") {
		assert.False(t, strings.Contains(string(e.Data), operator), "no secret in the events")
	}
}
