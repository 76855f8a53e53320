package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpapi"
)

// TestOperationalServesOnlyTheProbesAndMetricsUnderTheAPIRules: the
// handler of a process without the API serves /healthz, /readyz and
// /metrics and nothing else; /metrics needs a token and an allowed host,
// the probes neither, as on the API.
func TestOperationalServesOnlyTheProbesAndMetricsUnderTheAPIRules(t *testing.T) {
	secret, line, err := httpapi.NewToken("prom", httpapi.RoleViewer)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(file, []byte(line+"\n"), 0o600))
	tokens, err := httpapi.LoadTokens(file)
	require.NoError(t, err)
	hosts, err := httpapi.ParseAllowedHosts("saga.example.com", "127.0.0.1:0")
	require.NoError(t, err)
	srv := httptest.NewServer(httpapi.Operational(httpapi.Config{Metrics: checks{}, Readiness: checks{{Name: "kafka", OK: false, Error: "down"}},
		Tokens: tokens, Hosts: hosts}))
	defer srv.Close()

	get := func(path, host, token string) int {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, get("/healthz", "", ""))
	assert.Equal(t, http.StatusServiceUnavailable, get("/readyz", "", ""), "the failing check makes it 503")
	assert.Equal(t, http.StatusServiceUnavailable, get("/readyz", "rebound.attacker.test", ""), "probes take any host")
	assert.Equal(t, http.StatusUnauthorized, get("/metrics", "", ""))
	assert.Equal(t, http.StatusOK, get("/metrics", "", secret))
	assert.Equal(t, http.StatusOK, get("/metrics", "saga.example.com", secret))
	assert.Equal(t, http.StatusMisdirectedRequest, get("/metrics", "rebound.attacker.test", secret))
	assert.Equal(t, http.StatusNotFound, get("/api/tasks", "", secret))
	assert.Equal(t, http.StatusNotFound, get("/ui/", "", secret))
}
