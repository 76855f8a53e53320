package secure_test

import (
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/secure"
)

func TestIssueServerMakesCertificatesKafkaAndKurrentDBRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secrets")
	is, err := secure.IssueServer(dir, []string{"kafka", "eventstore", "localhost", "127.0.0.1"}, 0o644)
	require.NoError(t, err)
	assert.True(t, is.NewCA)
	assert.True(t, is.NewCert)

	st, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	for path, mode := range map[string]os.FileMode{is.CA: 0o644, is.Cert: 0o644, is.Key: 0o644, is.CAKey: 0o600} {
		st, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, mode, st.Mode().Perm(), path)
	}

	// The key is RSA in PKCS#8, one PEM block and nothing else (KurrentDB
	// reads the lines between the first and the last).
	keyPEM, err := os.ReadFile(is.Key)
	require.NoError(t, err)
	block, rest := pem.Decode(keyPEM)
	require.NotNil(t, block)
	assert.Equal(t, "PRIVATE KEY", block.Type)
	assert.Empty(t, rest)
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	require.NoError(t, err)
	assert.IsType(t, &rsa.PrivateKey{}, key)

	pair, err := tls.LoadX509KeyPair(is.Cert, is.Key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	caPEM, err := os.ReadFile(is.CA)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	for _, host := range []string{"kafka", "eventstore", "localhost", "127.0.0.1"} {
		_, err := cert.Verify(x509.VerifyOptions{DNSName: host, Roots: roots})
		assert.NoError(t, err, host)
	}
	assert.Error(t, cert.VerifyHostname("elsewhere"))
	assert.ElementsMatch(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, cert.ExtKeyUsage)
	assert.NotZero(t, cert.KeyUsage&x509.KeyUsageDigitalSignature)
	assert.NotZero(t, cert.KeyUsage&x509.KeyUsageKeyEncipherment)

	// Reused as it is; a new host means a new certificate from the same CA.
	again, err := secure.IssueServer(dir, []string{"kafka", "eventstore"}, 0o600)
	require.NoError(t, err)
	assert.False(t, again.NewCA)
	assert.False(t, again.NewCert)
	st, err = os.Stat(is.Key)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the mode follows the latest call")
	more, err := secure.IssueServer(dir, []string{"kafka", "eventstore", "kafka.example.com"}, 0o644)
	require.NoError(t, err)
	assert.False(t, more.NewCA)
	assert.True(t, more.NewCert)
	caAgain, err := os.ReadFile(is.CA)
	require.NoError(t, err)
	assert.Equal(t, caPEM, caAgain)
}

func TestIssueServerReissuesTheSecureModesECKey(t *testing.T) {
	dir := t.TempDir()
	_, err := secure.Prepare(dir)
	require.NoError(t, err)
	is, err := secure.IssueServer(dir, []string{"localhost"}, 0o600)
	require.NoError(t, err)
	assert.False(t, is.NewCA, "the secure mode's CA is reused")
	assert.True(t, is.NewCert, "its EC key is not one KurrentDB reads")
}

func TestIssueServerRefusesHalfACA(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, secure.CAFile), []byte("x"), 0o600))
	_, err := secure.IssueServer(dir, []string{"localhost"}, 0o600)
	assert.ErrorIs(t, err, secure.ErrIncomplete)
	_, err = secure.IssueServer(t.TempDir(), nil, 0o600)
	assert.Error(t, err)
}

func TestEnsurePasswordKeepsAnOperatorsPassword(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pw")
	wrote, err := secure.EnsurePassword(path, 0o644)
	require.NoError(t, err)
	assert.True(t, wrote)
	first, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Regexp(t, `^[A-Za-z0-9_-]{32}$`, string(first), "no newline")
	wrote, err = secure.EnsurePassword(path, 0o600)
	require.NoError(t, err)
	assert.False(t, wrote)
	second, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, first, second)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}
