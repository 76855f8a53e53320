package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
)

// TestScavengeCommand starts a scavenge of an embedded event store and
// waits for its result; --stop of an unknown scavenge fails with the
// server's NotFound.
func TestScavengeCommand(t *testing.T) {
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "esdb://" + srv.Addr() + "?tls=false"
	require.NoError(t, scavenge(ctx, []string{"--eventstore", url}))
	require.NoError(t, scavenge(ctx, []string{"--eventstore", url, "-o", "json"}))
	err = scavenge(ctx, []string{"--eventstore", url, "--stop", "no-such-id"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NotFound")
}
