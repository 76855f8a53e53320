package eventstore_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/eventstore/eventstoretest"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// dial returns a Store of its own for each subtest, closed when it ends.
func dial(url string) func(t *testing.T) *eventstore.Store {
	return func(t *testing.T) *eventstore.Store {
		s, err := eventstore.Dial(url, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

// embedded starts one embedded server for a whole suite, shared by its
// subtests as a real server would be.
func embedded(t *testing.T, cfg esdbserver.Config) string {
	cfg.Listen, cfg.DataDir = "127.0.0.1:0", t.TempDir()
	srv, err := esdbserver.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return fmt.Sprintf("esdb://%s?tls=false", srv.Addr())
}

// unary makes a connection string force the AppendToStream path.
func unary(url string) string {
	if strings.Contains(url, "?") {
		return url + "&appendPath=unary"
	}
	return url + "?appendPath=unary"
}

// runOnPath runs the contract with appends through the given path, and
// checks, with one more append, that they went that way.
func runOnPath(t *testing.T, url string, want eventstore.AppendPath) {
	store := dial(url)
	eventstoretest.Run(t, func(t *testing.T) processes.EventStore { return store(t) })
	s := store(t)
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := s.Append(c, "contract-path-"+uuid.NewString(), domain.ExpectNoStream(), domain.NewEvent{Type: "E", Data: []byte(`{}`)})
	require.NoError(t, err)
	assert.Equal(t, want, s.AppendPath(), "append path")
}

// TestContractEmbedded runs the port's contract against the embedded
// server, with appends pipelined on BatchAppend, and through
// AppendToStream.
func TestContractEmbedded(t *testing.T) {
	url := embedded(t, esdbserver.Config{})
	t.Run("pipelined", func(t *testing.T) { runOnPath(t, url, eventstore.AppendPipelined) })
	t.Run("unary", func(t *testing.T) { runOnPath(t, unary(url), eventstore.AppendUnary) })
}

// TestContractEmbeddedWithoutBatchAppend runs it against a server that
// answers BatchAppend with Unimplemented, as an older EventStoreDB does:
// the adapter falls back to AppendToStream.
func TestContractEmbeddedWithoutBatchAppend(t *testing.T) {
	runOnPath(t, embedded(t, esdbserver.Config{DisableBatchAppend: true}), eventstore.AppendUnary)
}

// TestContractServer runs it against the server at SAGA_TEST_EVENTSTORE
// (EventStoreDB or KurrentDB), when there is one, on both append paths
// (the pipelined one falls back by itself on a server without
// BatchAppend).
func TestContractServer(t *testing.T) {
	url := os.Getenv("SAGA_TEST_EVENTSTORE")
	if url == "" {
		t.Skip("SAGA_TEST_EVENTSTORE is not set")
	}
	t.Run("pipelined", func(t *testing.T) {
		store := dial(url)
		eventstoretest.Run(t, func(t *testing.T) processes.EventStore { return store(t) })
	})
	t.Run("unary", func(t *testing.T) { runOnPath(t, unary(url), eventstore.AppendUnary) })
}

// TestContractFeed runs it against a fan-out's Feed, whose first
// SubscribeAll is fed by the fan-out's shared subscription.
func TestContractFeed(t *testing.T) {
	url := os.Getenv("SAGA_TEST_EVENTSTORE")
	if url == "" {
		url = embedded(t, esdbserver.Config{})
	}
	store := dial(url)
	eventstoretest.Run(t, func(t *testing.T) processes.EventStore {
		fanout := eventstore.NewFanout(store(t), "")
		fanout.AttachWait = time.Second
		feed := fanout.Register("contract")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = fanout.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return feed
	})
}
