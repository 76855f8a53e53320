package eventstore_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
)

// These tests are of the adapter itself; the port's contract is
// eventstoretest's suite (contract_test.go). They run against the embedded
// server, or against the EventStoreDB named by SAGA_TEST_EVENTSTORE.
func open(t *testing.T) (*eventstore.Store, *esdbserver.Server) {
	t.Helper()
	url := os.Getenv("SAGA_TEST_EVENTSTORE")
	var srv *esdbserver.Server
	if url == "" {
		var err error
		srv, err = esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = srv.Close() })
		url = fmt.Sprintf("esdb://%s?tls=false", srv.Addr())
	}
	s, err := eventstore.Dial(url, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, srv
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func newEvent(typ, data string) domain.NewEvent {
	return domain.NewEvent{Type: typ, Data: []byte(data), Metadata: domain.EventMetadata{CorrelationID: "o-1", CausationID: "m-1", Actor: "test"}}
}

func TestSubscriptionSurvivesServerRestart(t *testing.T) {
	if os.Getenv("SAGA_TEST_EVENTSTORE") != "" {
		t.Skip("restarts the embedded server")
	}
	dir := t.TempDir()
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: dir})
	require.NoError(t, err)
	addr := srv.Addr()
	s, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false", addr), nil)
	require.NoError(t, err)
	defer s.Close()
	prefix := "restart-"
	_, err = s.Append(ctx(t), prefix+"a", domain.ExpectAny(), newEvent("E", `{"n":0}`))
	require.NoError(t, err)

	events := make(chan domain.RecordedEvent, 10)
	go func() {
		_ = s.SubscribeAll(ctx(t), domain.FromStart(), prefix, func(it domain.SubscriptionItem) error {
			if it.Event != nil {
				events <- *it.Event
			}
			return nil
		})
	}()
	first := <-events
	require.NoError(t, srv.Close())
	srv, err = esdbserver.Start(esdbserver.Config{Listen: addr, DataDir: dir})
	require.NoError(t, err)
	defer srv.Close()
	_, err = s.Append(ctx(t), prefix+"a", domain.ExpectRevision(0), newEvent("E", `{"n":1}`))
	require.NoError(t, err, "appends retry through the restart")
	select {
	case second := <-events:
		assert.Equal(t, uint64(1), second.Revision, "the subscription resumed after the last delivered event")
		assert.Greater(t, second.Position, first.Position)
	case <-time.After(15 * time.Second):
		t.Fatal("the subscription did not resume after the restart")
	}
	select {
	case dup := <-events:
		t.Fatalf("unexpected repeat %v", dup)
	default:
	}
}

func TestAdapterWaitsForAServerThatStartsLate(t *testing.T) {
	if os.Getenv("SAGA_TEST_EVENTSTORE") != "" {
		t.Skip("starts the embedded server")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	s, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false", addr), nil)
	require.NoError(t, err)
	defer s.Close()

	appended := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx(t), "task-late", domain.ExpectNoStream(), newEvent("E", `{}`))
		appended <- err
	}()
	// The first append fails its discovery and the client closes itself;
	// the adapter must come back once the server is there.
	select {
	case err := <-appended:
		t.Fatalf("append returned before the server existed: %v", err)
	case <-time.After(1500 * time.Millisecond): // longer than the client's 10 discovery tries
	}
	srv, err := esdbserver.Start(esdbserver.Config{Listen: addr, DataDir: t.TempDir()})
	require.NoError(t, err)
	defer srv.Close()
	require.NoError(t, <-appended)
}

// TestAppendsThatCanNeverSucceedAreRefused checks the one classification of
// append errors: too large for the server (InvalidArgument) or for gRPC
// (ResourceExhausted, message larger than max) is domain.ErrAppendRefused,
// so that callers dead-letter instead of retrying forever.
func TestAppendsThatCanNeverSucceedAreRefused(t *testing.T) {
	if os.Getenv("SAGA_TEST_EVENTSTORE") != "" {
		t.Skip("needs the embedded server's limits")
	}
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), MaxEventSize: 64 << 10})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	for path, suffix := range paths {
		t.Run(string(path), func(t *testing.T) {
			s, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false%s", srv.Addr(), suffix), nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			name := func(n string) string { return "task-" + n + "-" + string(path) }

			big := newEvent("A", `{}`)
			big.Data = []byte(`"` + strings.Repeat("a", 100<<10) + `"`)
			_, err = s.Append(ctx(t), name("big"), domain.ExpectNoStream(), big)
			require.ErrorIs(t, err, domain.ErrAppendRefused)

			huge := newEvent("A", `{}`)
			huge.Metadata.TraceParent = strings.Repeat("a", 20<<20)
			_, err = s.Append(ctx(t), name("huge"), domain.ExpectNoStream(), huge)
			require.ErrorIs(t, err, domain.ErrAppendRefused)

			_, err = s.Append(ctx(t), name("fine"), domain.ExpectNoStream(), newEvent("A", `{}`))
			require.NoError(t, err)
			_, err = s.Append(ctx(t), name("fine"), domain.ExpectNoStream(), newEvent("B", `{}`))
			require.ErrorIs(t, err, domain.ErrConcurrencyConflict)
			assert.NotErrorIs(t, err, domain.ErrAppendRefused)

			_, err = s.Append(ctx(t), name("fine"), domain.ExpectRevision(0), newEvent("B", `{}`))
			require.NoError(t, err)
			_, err = s.Append(ctx(t), name("fine"), domain.ExpectRevision(0), newEvent("C", `{}`))
			require.ErrorIs(t, err, domain.ErrConcurrencyConflict, "a stale revision conflicts")
			assert.Equal(t, path, s.AppendPath())
		})
	}
}

// TestCheckpointSurvivesDeletedStreams tombstones and soft-deletes a
// checkpoint stream: saving goes on (a tombstoned stream in the next
// generation), and loading finds the newest live checkpoint, or none,
// never an error that would stop its follower for good.
func TestCheckpointSurvivesDeletedStreams(t *testing.T) {
	s, srv := open(t)
	if srv == nil {
		t.Skip("tombstones a stream: embedded server only")
	}
	client, err := esdb.NewClient(mustConf(t, fmt.Sprintf("esdb://%s?tls=false", srv.Addr())))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	name := "cp-" + uuid.NewString()[:8]

	require.NoError(t, s.SaveCheckpoint(ctx(t), name, 7))
	_, err = client.TombstoneStream(ctx(t), "saga-checkpoint-"+name, esdb.TombstoneStreamOptions{ExpectedRevision: esdb.Any{}})
	require.NoError(t, err)
	require.NoError(t, s.SaveCheckpoint(ctx(t), name, 9), "saving after a tombstone")
	pos, ok, err := s.LoadCheckpoint(ctx(t), name)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, uint64(9), pos)

	// Another process (a restart) finds the live generation too.
	fresh, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false", srv.Addr()), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fresh.Close() })
	pos, ok, err = fresh.LoadCheckpoint(ctx(t), name)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, uint64(9), pos)

	// A soft-deleted checkpoint is no checkpoint: start from the start.
	_, err = client.DeleteStream(ctx(t), "saga-checkpoint-"+name+".2", esdb.DeleteStreamOptions{ExpectedRevision: esdb.Any{}})
	require.NoError(t, err)
	_, ok, err = fresh.LoadCheckpoint(ctx(t), name)
	require.NoError(t, err)
	assert.False(t, ok)
	require.NoError(t, fresh.SaveCheckpoint(ctx(t), name, 11))
	pos, _, err = fresh.LoadCheckpoint(ctx(t), name)
	require.NoError(t, err)
	assert.Equal(t, uint64(11), pos)
}

func mustConf(t *testing.T, url string) *esdb.Configuration {
	conf, err := esdb.ParseConnectionString(url)
	require.NoError(t, err)
	return conf
}

// TestTaskCheckpointKeepsItsTasksInABoundedStream saves more task
// checkpoints than the stream keeps: the newest is loaded with its tasks,
// and the stream reads back no more than its $maxCount.
func TestTaskCheckpointKeepsItsTasksInABoundedStream(t *testing.T) {
	s, _ := open(t)
	name := "tcp-" + uuid.NewString()[:8]
	for i := range 25 {
		require.NoError(t, s.SaveTaskCheckpoint(ctx(t), name, domain.TaskCheckpoint{Position: uint64(100 + i), Tasks: []string{"a", fmt.Sprint("t", i)}}))
	}
	cp, ok, err := s.LoadTaskCheckpoint(ctx(t), name)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, domain.TaskCheckpoint{Position: 124, Tasks: []string{"a", "t24"}}, cp)
	kept, err := s.ReadStream(ctx(t), "saga-checkpoint-"+name)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(kept), 10, "the checkpoint stream is bounded")

	// A plain position checkpoint reads the same stream format.
	pos, ok, err := s.LoadCheckpoint(ctx(t), name)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, uint64(124), pos)
}
