package engine_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
)

// TestStartReportsEveryProblemOfTheConfigAndStartsNothing gives Start a
// Config with several problems: the error names each of them, and
// nothing was started: no data written, no listener, no goroutine.
func TestStartReportsEveryProblemOfTheConfigAndStartsNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	data := filepath.Join(t.TempDir(), "data")
	esListen := freeAddr(t)
	cfg := engine.Config{
		DataDir: data, EventStoreListen: esListen, KafkaListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Roles:              []engine.Role{engine.RoleScheduler, "bogus"},
		MaxRenderedBytes:   -1,
		SupervisorInterval: -time.Second,
		SecretsDir:         filepath.Join(t.TempDir(), "missing"),
		APITLSCert:         "cert.pem",
		Workflows:          []*domain.Workflow{{Name: "broken"}},
	}
	err := cfg.Validate()
	require.Error(t, err)
	_, startErr := engine.Start(cfg)
	require.Error(t, startErr)
	assert.Equal(t, err.Error(), startErr.Error(), "Start reports what Validate does")
	for _, want := range []string{`unknown role "bogus"`, "MaxRenderedBytes must not be negative", "SupervisorInterval must not be negative",
		"secrets directory", "APITLSCert and APITLSKey", "workflow broken"} {
		assert.Contains(t, startErr.Error(), want)
	}
	assert.ErrorIs(t, startErr, engine.ErrInvalidConfig)
	assert.ErrorIs(t, startErr, domain.ErrInvalidWorkflow, "the workflow's own error is kept")
	var problems *engine.ConfigError
	require.True(t, errors.As(startErr, &problems))
	assert.Len(t, problems.Problems, 6)

	_, statErr := os.Stat(data)
	assert.ErrorIs(t, statErr, os.ErrNotExist, "no data directory was created")
	assertRefused(t, esListen)
}

// TestValidateAcceptsTheZeroConfigWithADataDirectory: zero values are
// defaults, not problems.
func TestValidateAcceptsTheZeroConfigWithADataDirectory(t *testing.T) {
	assert.NoError(t, (&engine.Config{DataDir: t.TempDir()}).Validate())
	assert.ErrorContains(t, (&engine.Config{}).Validate(), "a data directory is required for the embedded event store")
	assert.NoError(t, (&engine.Config{KafkaBrokers: []string{"127.0.0.1:9092"}, EventStoreURL: "esdb://127.0.0.1:2113?tls=false"}).Validate())
}

// freeAddr returns a loopback address no listener holds right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

// assertRefused checks that nothing accepts connections at addr.
func assertRefused(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		_ = conn.Close()
	}
	assert.Error(t, err, "something still listens on %s", addr)
}
