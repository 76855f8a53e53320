package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
)

// TestARefusedWorkflowDirectoryLogsEachProblemOnItsOwnLine: sagad
// refusing --workflows DIR logs every problem as a record of its own with
// its file and line, never one line with a literal \n.
func TestARefusedWorkflowDirectoryLogsEachProblemOnItsOwnLine(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("name: a\nsteps:\n  - {name: x, agent: y, budget: -1s}\n  - {name: x, agent: y}\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.json"), []byte("{"), 0o600))
	err := (&engine.Config{DataDir: t.TempDir(), WorkflowDirs: []string{dir}}).Validate()
	require.Error(t, err)

	var out bytes.Buffer
	logStopped(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: plainErrors})), err)
	text := out.String()
	assert.NotContains(t, text, `\n`, "no escaped line breaks")
	lines := strings.Split(strings.TrimSpace(text), "\n")
	require.Len(t, lines, 4, text)
	assert.Contains(t, lines[0], `source=`+filepath.Join(dir, "a.yaml")+` line=3 path=steps[0].budget problem="must be positive, not -1s"`)
	assert.Contains(t, lines[1], `line=4 path=steps[1].name`)
	assert.Contains(t, lines[2], `source=`+filepath.Join(dir, "b.json")+` line=1 problem="not valid JSON`)
	assert.Contains(t, lines[3], `msg="sagad stopped"`)
	assert.Contains(t, lines[3], "2 file(s) with problems (each problem is logged above)")
}
