package eventstore_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/eventstore/eventstoretest"
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
func embedded(t *testing.T) string {
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return fmt.Sprintf("esdb://%s?tls=false", srv.Addr())
}

// TestContractEmbedded runs the port's contract against the embedded server.
func TestContractEmbedded(t *testing.T) {
	store := dial(embedded(t))
	eventstoretest.Run(t, func(t *testing.T) processes.EventStore { return store(t) })
}

// TestContractServer runs it against the server at SAGA_TEST_EVENTSTORE
// (EventStoreDB or KurrentDB), when there is one.
func TestContractServer(t *testing.T) {
	url := os.Getenv("SAGA_TEST_EVENTSTORE")
	if url == "" {
		t.Skip("SAGA_TEST_EVENTSTORE is not set")
	}
	store := dial(url)
	eventstoretest.Run(t, func(t *testing.T) processes.EventStore { return store(t) })
}

// TestContractFeed runs it against a fan-out's Feed, whose first
// SubscribeAll is fed by the fan-out's shared subscription.
func TestContractFeed(t *testing.T) {
	url := os.Getenv("SAGA_TEST_EVENTSTORE")
	if url == "" {
		url = embedded(t)
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
