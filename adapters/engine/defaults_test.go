package engine_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
)

// TestAWorkflowBuiltInGoNeedsOnlyANameAndAnAgent: the engine takes a Go
// workflow whose steps set only their name and agent, as it takes the
// same file, with the documented defaults.
func TestAWorkflowBuiltInGoNeedsOnlyANameAndAnAgent(t *testing.T) {
	hello := &domain.Workflow{Name: "hello", Steps: []domain.StepDefinition{{Name: "greet", Agent: "greeter"}}}
	assert.NoError(t, (&engine.Config{DataDir: t.TempDir(), Workflows: []*domain.Workflow{hello}}).Validate())
}
