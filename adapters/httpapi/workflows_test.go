package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/domain"
)

// refusingWorkflows refuses every definition as a registry refuses one
// whose trigger overlaps a registered workflow's.
type refusingWorkflows struct {
	httpapi.Workflows
	checked, applied int
}

func (r *refusingWorkflows) refusal() error {
	return &domain.DefinitionError{Problems: []domain.Problem{{Path: "trigger", Message: `workflows "mine" and "theirs" (registered) both start on topic t for type x`}}}
}

func (r *refusingWorkflows) Check(context.Context, *domain.Workflow) (*domain.Workflow, error) {
	r.checked++
	return nil, r.refusal()
}

func (r *refusingWorkflows) Apply(context.Context, *domain.Workflow, string) (*domain.Workflow, bool, error) {
	r.applied++
	return nil, false, r.refusal()
}

// TestDryRunRunsTheChecksApplyRuns: POST /api/workflows?dryRun=true
// refuses what registering would refuse, and registers nothing; the
// refusal names the definition.
func TestDryRunRunsTheChecksApplyRuns(t *testing.T) {
	wfs := &refusingWorkflows{}
	srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: newView(t), Metrics: checks{}, Readiness: checks{}, Workflows: wfs}))
	defer srv.Close()
	for _, query := range []string{"?dryRun=true", ""} {
		resp, err := http.Post(srv.URL+"/api/workflows"+query, "application/json",
			strings.NewReader(`{"name":"mine","trigger":{"topics":["t"],"type":"x"},"steps":[{"name":"a","agent":"b"}]}`))
		require.NoError(t, err)
		var body struct {
			Error    string
			Problems []domain.Problem
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, query)
		assert.Contains(t, body.Error, "workflow mine: 1 problem(s)", query)
		require.Len(t, body.Problems, 1, query)
		assert.Contains(t, body.Problems[0].Message, `"theirs" (registered)`)
	}
	assert.Equal(t, 1, wfs.checked)
	assert.Equal(t, 1, wfs.applied, "the dry run applied nothing")
}
