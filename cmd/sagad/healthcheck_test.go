package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHealthcheckExitsByReadiness: sagad healthcheck succeeds only on a
// 200 from /readyz, prints the checks, asks an unspecified host on
// loopback, and fails on an answer that is not 200 or no answer at all.
func TestHealthcheckExitsByReadiness(t *testing.T) {
	code := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"status":"x","checks":[{"name":"kafka","ok":false}]}`))
	}))
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)

	var out bytes.Buffer
	require.NoError(t, runHealthcheck(context.Background(), []string{"--addr", "0.0.0.0:" + port}, &out))
	assert.Contains(t, out.String(), `"name":"kafka"`)

	code = http.StatusServiceUnavailable
	err = runHealthcheck(context.Background(), []string{"--addr", srv.Listener.Addr().String()}, &out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "503")

	err = runHealthcheck(context.Background(), []string{"--addr", srv.Listener.Addr().String(), "--path", "/elsewhere"}, &out)
	require.ErrorContains(t, err, "404")

	srv.Close()
	require.Error(t, runHealthcheck(context.Background(), []string{"--addr", srv.Listener.Addr().String()}, &out))
}

// TestHealthcheckOverTLS: with --tls-ca the check asks over TLS and
// trusts that CA only.
func TestHealthcheckOverTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	var out bytes.Buffer
	require.NoError(t, runHealthcheck(context.Background(), []string{"--addr", srv.Listener.Addr().String(), "--tls-ca", ca}, &out))
	assert.True(t, strings.HasPrefix(out.String(), "https://"), out.String())
	// Without the CA, plain HTTP to a TLS listener gets no 200.
	require.Error(t, runHealthcheck(context.Background(), []string{"--addr", srv.Listener.Addr().String()}, &out))
}
