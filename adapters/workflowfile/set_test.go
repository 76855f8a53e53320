package workflowfile_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/workflowfile"
)

// TestFilesWhoseTriggersOverlapAreRefusedTogether: two teams' files that
// would claim the same events are refused offline, as a problem of the
// later file that names both workflows, the earlier file and the line.
func TestFilesWhoseTriggersOverlapAreRefusedTogether(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a-billing.yaml", `
name: billing
trigger: {topics: [shop.events], type: checkout.completed, typeField: /type}
steps: [{name: bill, agent: billing}]
`)
	write(t, dir, "b-audit.yaml", `
name: audit-all
trigger:
  topics:
    - shop.audit
    - shop.events
steps: [{name: record, agent: audit}]
`)
	_, err := workflowfile.LoadDir(dir)
	var dirErr *workflowfile.DirError
	require.True(t, errors.As(err, &dirErr), "%v", err)
	des := dirErr.Problems()
	require.Len(t, des, 1, "%v", err)
	assert.Equal(t, filepath.Join(dir, "b-audit.yaml"), des[0].Source)
	require.Len(t, des[0].Problems, 1)
	p := des[0].Problems[0]
	assert.Equal(t, "trigger.topics[1]", p.Path)
	assert.Equal(t, 5, p.Line, "the line of the shared topic")
	assert.Contains(t, p.Message, `"audit-all" and "billing" (in `+filepath.Join(dir, "a-billing.yaml")+`)`)
	assert.Contains(t, p.Message, "topic shop.events")

	// Load checks files named one by one, and directories, as one set.
	other := t.TempDir()
	write(t, other, "fulfil.json", `{"name":"fulfil","trigger":{"topics":["shop.events"],"type":"checkout.completed","typeField":"/type"},"steps":[{"name":"ship","agent":"shipping"}]}`)
	_, err = workflowfile.Load(filepath.Join(dir, "a-billing.yaml"), other)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"fulfil" and "billing"`)
	assert.Contains(t, err.Error(), "for type checkout.completed")
	refunds := filepath.Join(other, "refund.yaml")
	write(t, other, "refund.yaml", "name: refund\ntrigger: {topics: [shop.refunds]}\nsteps: [{name: pay, agent: payments}]\n")
	files, err := workflowfile.Load(filepath.Join(dir, "b-audit.yaml"), refunds)
	require.NoError(t, err, "triggers on different topics do not overlap")
	require.Len(t, files, 2)
	assert.Equal(t, "audit-all", files[0].Workflow.Name)
	assert.Equal(t, refunds, files[1].Path)
}
