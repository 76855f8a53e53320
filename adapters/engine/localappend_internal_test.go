package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/eventstore/eventstoretest"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// inProcessStore starts an embedded server and a Store whose appends and
// subscriptions to $all go to it in process, as the engine wires them.
func inProcessStore(t *testing.T, cfg esdbserver.Config) (*esdbserver.Server, func(t *testing.T) *eventstore.Store) {
	cfg.Listen, cfg.DataDir = "127.0.0.1:0", t.TempDir()
	srv, err := esdbserver.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv, func(t *testing.T) *eventstore.Store {
		s, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false", srv.Addr()), nil)
		require.NoError(t, err)
		s.AppendInProcess(localAppends(srv))
		s.SubscribeInProcess(localSubscriptions(srv))
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

// TestContractInProcess runs the event-store port's contract with appends
// and subscriptions to $all going to the embedded server in process (other
// reads through gRPC): expected revisions, conflicts, idempotent retries,
// subscriptions from the start, from a position and by prefix, catch-up
// then live, a failing handler, cancellation.
func TestContractInProcess(t *testing.T) {
	_, store := inProcessStore(t, esdbserver.Config{})
	eventstoretest.Run(t, func(t *testing.T) processes.EventStore { return store(t) })
	assert.Equal(t, eventstore.AppendInProcessPath, store(t).AppendPath())
}

// TestInProcessAppendRefusals: what the server refuses through the network
// it refuses in process, with the same marks: an event or append over the
// limits, an event without a type, a tombstoned stream.
func TestInProcessAppendRefusals(t *testing.T) {
	srv, store := inProcessStore(t, esdbserver.Config{MaxEventSize: 1 << 10, MaxAppendSize: 2 << 10})
	s := store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	big := domain.NewEvent{Type: "Big", Data: []byte(`"` + strings.Repeat("x", 1<<10) + `"`)}
	_, err := s.Append(ctx, "refused-"+uuid.NewString(), domain.ExpectAny(), big)
	require.ErrorIs(t, err, domain.ErrAppendRefused)

	medium := domain.NewEvent{Type: "Medium", Data: []byte(`"` + strings.Repeat("x", 700) + `"`)}
	_, err = s.Append(ctx, "refused-"+uuid.NewString(), domain.ExpectAny(), medium, medium, medium)
	require.ErrorIs(t, err, domain.ErrAppendRefused, "over the append limit")

	_, err = s.Append(ctx, "refused-"+uuid.NewString(), domain.ExpectAny(), domain.NewEvent{Data: []byte(`{}`)})
	require.ErrorIs(t, err, domain.ErrAppendRefused, "no type")

	stream := "tombstoned-" + uuid.NewString()
	_, err = s.Append(ctx, stream, domain.ExpectNoStream(), domain.NewEvent{Type: "E", Data: []byte(`{}`)})
	require.NoError(t, err)
	_, err = srv.Store().Tombstone(ctx, stream, eslog.Any)
	require.NoError(t, err)
	_, err = s.Append(ctx, stream, domain.ExpectAny(), domain.NewEvent{Type: "E", Data: []byte(`{}`)})
	require.ErrorIs(t, err, domain.ErrAppendRefused)
	assert.True(t, errors.Is(err, eventstore.ErrStreamDeleted), "marked as a deleted stream, as the adapter's checkpoints look for: %v", err)

	_, err = s.Append(ctx, "conflict-"+uuid.NewString(), domain.ExpectRevision(3), domain.NewEvent{Type: "E", Data: []byte(`{}`)})
	require.ErrorIs(t, err, domain.ErrConcurrencyConflict)
}

// TestInProcessSubscriptionDeliversWhatTheNetworkDoes follows $all both
// ways over the same events, appended partly before and partly after the
// subscriptions start, and requires the same deliveries: ids, streams,
// types, data, metadata, revisions, positions and recorded times.
func TestInProcessSubscriptionDeliversWhatTheNetworkDoes(t *testing.T) {
	srv, local := inProcessStore(t, esdbserver.Config{})
	remote, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false", srv.Addr()), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = remote.Close() })
	s := local(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	appendSome := func(from int) {
		for i := from; i < from+20; i++ {
			_, err := s.Append(ctx, fmt.Sprintf("task-same-%d", i%3), domain.ExpectAny(), domain.NewEvent{Type: "E",
				Data: []byte(fmt.Sprintf(`{"n":%d}`, i)), Metadata: domain.EventMetadata{CorrelationID: "c", Actor: "test", CausationID: fmt.Sprint(i)}})
			require.NoError(t, err)
			_, err = s.Append(ctx, "other-stream", domain.ExpectAny(), domain.NewEvent{Type: "O", Data: []byte(`{}`)})
			require.NoError(t, err)
		}
	}
	appendSome(0)
	follow := func(store *eventstore.Store) <-chan []domain.RecordedEvent {
		out := make(chan []domain.RecordedEvent, 1)
		go func() {
			var got []domain.RecordedEvent
			subCtx, stop := context.WithCancel(ctx)
			defer stop()
			_ = store.SubscribeAll(subCtx, domain.FromStart(), "task-same-", func(it domain.SubscriptionItem) error {
				if it.Event != nil {
					got = append(got, *it.Event)
				}
				if len(got) == 40 {
					stop()
				}
				return nil
			})
			out <- got
		}()
		return out
	}
	viaLocal, viaNetwork := follow(s), follow(remote)
	appendSome(20)
	a, b := <-viaLocal, <-viaNetwork
	require.Len(t, a, 40)
	assert.Equal(t, b, a)
}

// TestInProcessAppendErrorsAreMarkedAsThroughTheNetwork: each way the
// store can fail an append is marked as the adapter marks it through the
// network. A full disk is neither refused (the order would be
// dead-lettered) nor retried here (the caller retries when it decides).
func TestInProcessAppendErrorsAreMarkedAsThroughTheNetwork(t *testing.T) {
	full := appendError(errors.Wrap(eslog.ErrNoSpace, "write log"))
	assert.False(t, errors.Is(full, domain.ErrAppendRefused))
	assert.False(t, errors.Is(full, eventstore.ErrUnavailable))
	assert.True(t, errors.Is(full, eslog.ErrNoSpace))

	for _, failed := range []error{eslog.ErrClosed, errors.Wrap(eslog.ErrWriteFailed, "fsync")} {
		assert.True(t, errors.Is(appendError(failed), eventstore.ErrUnavailable), "%v is retried", failed)
	}
	wrong := &eslog.WrongExpectedVersionError{Stream: "s", Expected: eslog.Revision(3), Current: 5}
	assert.ErrorIs(t, appendError(wrong), domain.ErrConcurrencyConflict)
	assert.ErrorIs(t, appendError(errors.Wrap(eslog.ErrInvalidRequest, "too big")), domain.ErrAppendRefused)
	deleted := appendError(&eslog.StreamDeletedError{Stream: "s"})
	assert.ErrorIs(t, deleted, domain.ErrAppendRefused)
	assert.True(t, errors.Is(deleted, eventstore.ErrStreamDeleted))
	assert.ErrorIs(t, appendError(context.Canceled), context.Canceled)
}

// TestReadinessNamesASubscriptionFailingInPlace: when a subscription to
// $all keeps failing at one place (an event the store cannot read), the
// event-store readiness check fails and says where and why, though the
// server itself answers.
func TestReadinessNamesASubscriptionFailingInPlace(t *testing.T) {
	defer func(d time.Duration) { subscriptionFailingAfter = d }(subscriptionFailingAfter)
	subscriptionFailingAfter = 0
	_, store := inProcessStore(t, esdbserver.Config{})
	s := store(t)
	s.SubscribeInProcess(func(context.Context, uint64, bool, string, func(eventstore.LocalRecorded) error, func() error) error {
		return errors.New("frame at 4096: checksum mismatch")
	})
	a := &App{Store: s}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.SubscribeAll(ctx, domain.FromStart(), "task-", func(domain.SubscriptionItem) error { return nil })
	}()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool { return len(s.SubscriptionFailures(0)) > 0 }, 10*time.Second, time.Millisecond)
	err := a.check(context.Background(), checkEventStore)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "from the start")
	assert.Contains(t, err.Error(), "checksum mismatch")
}
