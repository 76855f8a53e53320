package integration_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// TestLargestOrderFitsItsOwnStore: an order of the largest size sagad
// accepts by default becomes a task in sagad's own event store, whose
// appends are bounded by KurrentDB's default of 1 MiB: the order limit is
// set below the store's.
func TestLargestOrderFitsItsOwnStore(t *testing.T) {
	s := startSystem(t, engine.Config{})
	head := `{"orderId":"largest-1","items":[{"sku":"book","qty":1}],"pad":"`
	body := head + strings.Repeat("p", processes.DefaultMaxOrderSize-len(head)-2) + `"}`
	assert.Len(t, body, processes.DefaultMaxOrderSize)
	s.publish("largest-1", []byte(body))
	tasks := s.awaitTerminal([]string{"largest-1"}, 60*time.Second)
	assert.Equal(t, domain.StateProcessed, tasks["largest-1"].State)
}

// TestNodeClientSettlesWrongExpectedVersion runs the official Node client
// of EventStoreDB (@eventstore/db-client, testdata/nodeclient) against the
// embedded event store: an append (through BatchAppend), a Delete and a
// Tombstone with a wrong expected revision settle with its
// WrongExpectedVersionError (with the trailers the
// store sent before, the client threw a TypeError and never settled). It
// skips without node or the package: install it with
// npm install --prefix integration/testdata/nodeclient, or name a
// node_modules directory that has it in $SAGA_NODE_MODULES.
func TestNodeClientSettlesWrongExpectedVersion(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "nodeclient"))
	require.NoError(t, err)
	modules := os.Getenv("SAGA_NODE_MODULES")
	if modules == "" {
		modules = filepath.Join(dir, "node_modules")
	}
	if _, err := os.Stat(filepath.Join(modules, "@eventstore", "db-client")); err != nil {
		t.Skipf("@eventstore/db-client is not installed in %s (npm install --prefix integration/testdata/nodeclient)", modules)
	}
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Logger: testLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })

	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(c, node, filepath.Join(dir, "check.js"), "esdb://"+srv.Addr()+"?tls=false")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "node check:\n%s", out)
	assert.Contains(t, string(out), `"check":"append","ok":true`)
	assert.Contains(t, string(out), `"check":"delete","ok":true`)
	assert.Contains(t, string(out), `"check":"tombstone","ok":true`)
	t.Logf("%s", out)
}
