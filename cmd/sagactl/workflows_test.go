package main

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
)

const (
	billingYAML = `name: billing
trigger: {topics: [shop.events], type: checkout.completed, typeField: /type}
steps: [{name: bill, agent: billing}]
`
	// auditAllYAML starts on every event of shop.events, billing's topic.
	auditAllYAML = `name: audit-all
trigger:
  topics: [shop.events]
steps: [{name: record, agent: audit}]
`
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// TestValidateWorksWithoutSagad: a CI job confirms a valid file by the
// exit code with no sagad running, and a file alone or a set of files
// that apply would refuse is refused, with its file and line.
func TestValidateWorksWithoutSagad(t *testing.T) {
	dir := t.TempDir()
	billing := writeFile(t, dir, "billing.yaml", billingYAML)
	auditAll := writeFile(t, dir, "audit-all.yaml", auditAllYAML)
	broken := writeFile(t, dir, "broken.yaml", "name: broken\nsteps:\n  - {name: a, agent: b, budget: 0s}\n")
	nobody := &saga{t: t, app: &engine.App{}}
	down := "http://127.0.0.1:1" // nothing listens there

	out, errOut, code := nobody.runAt(down, "workflows", "validate", billing)
	assert.Equal(t, 0, code, out+errOut)
	assert.Contains(t, out, "workflow billing is valid (checked offline): "+billing)
	assert.Contains(t, errOut, "not against the registered workflows")
	out, errOut, code = nobody.runAt(down, "workflows", "validate", "--offline", billing)
	assert.Equal(t, 0, code, out+errOut)
	assert.NotContains(t, errOut, "is sagad running")

	out, errOut, code = nobody.runAt(down, "workflows", "validate", "--offline", broken)
	assert.Equal(t, exitError, code, out+errOut)
	assert.Contains(t, errOut, broken)
	assert.Contains(t, errOut, "line 3: steps[0].budget: must be positive")

	out, errOut, code = nobody.runAt(down, "workflows", "validate", billing, auditAll)
	assert.Equal(t, exitError, code, out+errOut)
	assert.Contains(t, errOut, billing)
	assert.Contains(t, errOut, "line 3: trigger.topics[0]")
	assert.Contains(t, errOut, `"audit-all" and "billing"`)
	assert.NotContains(t, out, "is valid")
}

// TestValidateDiffAndApplyRefuseWhatApplyRefuses: with sagad running,
// validate runs the checks apply runs against the registered workflows,
// diff does not call a refused file new, and apply registers nothing.
func TestValidateDiffAndApplyRefuseWhatApplyRefuses(t *testing.T) {
	s := startSaga(t, engine.Config{Workflows: testWorkflows(5e9)})
	dir := t.TempDir()
	billing := writeFile(t, dir, "billing.yaml", billingYAML)
	out, errOut, code := s.run("workflows", "apply", billing)
	require.Equal(t, 0, code, out+errOut)

	other := t.TempDir()
	auditAll := writeFile(t, other, "audit-all.yaml", auditAllYAML)
	for _, cmd := range []string{"validate", "diff", "apply"} {
		out, errOut, code := s.run("workflows", cmd, auditAll)
		assert.Equal(t, exitError, code, cmd+": "+out+errOut)
		assert.Contains(t, errOut, auditAll+": 1 problem(s)", cmd)
		assert.Contains(t, errOut, "line 3: trigger.topics[0]", cmd)
		assert.Contains(t, errOut, `"audit-all" and "billing" (registered)`, cmd)
		assert.NotContains(t, out, "new", cmd)
		assert.NotContains(t, out, "valid", cmd)
	}
	resp, err := http.Get(s.api + "/api/workflows/audit-all")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "apply registered nothing")

	fine := writeFile(t, other, "refund.yaml", "name: refund\ntrigger: {topics: [shop.events], type: refund.requested, typeField: /type}\nsteps: [{name: pay, agent: payments}]\n")
	out, errOut, code = s.run("workflows", "validate", fine)
	assert.Equal(t, 0, code, out+errOut)
	assert.Contains(t, out, "workflow refund is valid: "+fine)
	out, _, code = s.run("workflows", "diff", fine)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "workflow refund: new")
}
