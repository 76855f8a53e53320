package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpapi"
)

// TestCertsPreparesTheComposeSecrets runs sagad certs as compose.yaml's
// certs service does, twice: everything the compose file mounts exists,
// readable as asked, and nothing is replaced the second time.
func TestCertsPreparesTheComposeSecrets(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	args := []string{"--out", dir, "--hosts", "kafka,eventstore,localhost,127.0.0.1",
		"--passwords", "kafka-password,eventstore-admin-password,eventstore-ops-password",
		"--tokens-file", "api-tokens", "--file-mode", "0644"}
	require.NoError(t, runCerts(args))
	files := []string{"ca.pem", "server.pem", "server-key.pem", "kafka-password", "eventstore-admin-password", "eventstore-ops-password", "api-tokens"}
	before := map[string][]byte{}
	for _, f := range files {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err, f)
		assert.Equal(t, os.FileMode(0o644), st.Mode().Perm(), f)
		before[f], err = os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
	}
	st, err := os.Stat(filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// A token added by 'sagad token' keeps the file's mode, and sagad reads it.
	require.NoError(t, runToken([]string{"--name", "ops", "--role", "operator", "--file", filepath.Join(dir, "api-tokens")}))
	tokens, err := httpapi.LoadTokens(filepath.Join(dir, "api-tokens"))
	require.NoError(t, err)
	assert.True(t, tokens.Enabled())
	st, err = os.Stat(filepath.Join(dir, "api-tokens"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())

	require.NoError(t, runCerts(args))
	for _, f := range files[:len(files)-1] {
		after, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.Equal(t, before[f], after, "%s is reused", f)
	}

	assert.Error(t, runCerts([]string{"--out", dir, "--file-mode", "0666"}), "world-writable")
	assert.Error(t, runCerts([]string{"--out", dir, "--passwords", "../elsewhere"}))
	assert.Error(t, runCerts([]string{"--hosts", "a"}), "no --out")
}
