package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/projections"
)

type checks []httpapi.Check

func (c checks) Readiness(context.Context) []httpapi.Check { return c }
func (checks) WriteMetrics(io.Writer)                      {}

func TestReadyzNamesEveryCheck(t *testing.T) {
	for _, tc := range []struct {
		checks checks
		code   int
	}{
		{checks{{Name: "projection", OK: true}, {Name: "kafka", OK: true}}, http.StatusOK},
		{checks{{Name: "projection", OK: true}, {Name: "kafka", Error: "ping: no broker"}}, http.StatusServiceUnavailable},
	} {
		srv := httptest.NewServer(httpapi.Handler(projections.NewTasks(nil), nil, nil, tc.checks, tc.checks))
		resp, err := http.Get(srv.URL + "/readyz")
		require.NoError(t, err)
		var body struct {
			Status string          `json:"status"`
			Checks []httpapi.Check `json:"checks"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		srv.Close()
		assert.Equal(t, tc.code, resp.StatusCode)
		assert.Equal(t, []httpapi.Check(tc.checks), body.Checks)
	}
}

func TestListLimitIsCapped(t *testing.T) {
	srv := httptest.NewServer(httpapi.Handler(projections.NewTasks(nil), nil, nil, checks{}, checks{}))
	defer srv.Close()
	for limit, code := range map[string]int{"5": 200, "1000000": 200, "0": 400, "x": 400} {
		resp, err := http.Get(srv.URL + "/api/tasks?limit=" + limit)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, code, resp.StatusCode, limit)
	}
}
