package eventstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
)

// followScripted subscribes a Store to $all on the scripted server at addr
// (through the path the connection string's suffix picks) and returns the
// events delivered until caught up.
func followScripted(t *testing.T, addr, suffix, prefix string) []domain.RecordedEvent {
	t.Helper()
	s := dialStore(t, fmt.Sprintf("esdb://%s?tls=false%s", addr, suffix))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []domain.RecordedEvent
	err := s.SubscribeAll(ctx, domain.FromStart(), prefix, func(it domain.SubscriptionItem) error {
		if it.CaughtUp {
			return errEnough
		}
		got = append(got, *it.Event)
		return nil
	})
	require.ErrorIs(t, err, errEnough)
	return got
}

// TestResumeInsideALegacyTransaction: the events of a transaction written
// by EventStoreDB before v20 share a commit position and differ in their
// prepare positions. A subscription dropped inside one resumes from both
// parts of the last event's position as the server sent them, and misses
// none of the rest of the transaction.
func TestResumeInsideALegacyTransaction(t *testing.T) {
	events := []scriptedEvent{
		{stream: "task-a", typ: "A", revision: 0, commit: 500, prepare: 500, data: `{}`},
		{stream: "task-t", typ: "T1", revision: 0, commit: 1000, prepare: 900, data: `{}`},
		{stream: "task-t", typ: "T2", revision: 1, commit: 1000, prepare: 950, data: `{}`},
		{stream: "task-t", typ: "T3", revision: 2, commit: 1000, prepare: 980, data: `{}`},
		{stream: "task-b", typ: "B", revision: 0, commit: 1100, prepare: 1100, data: `{}`},
	}
	for path, suffix := range paths {
		t.Run(string(path), func(t *testing.T) {
			fake := &scriptedStreams{read: subscriptionScript(events, map[int]int{0: 2})}
			addr := startScripted(t, fake)
			got := followScripted(t, addr, suffix, "")
			var types []string
			for _, e := range got {
				types = append(types, e.Type)
			}
			assert.Equal(t, []string{"A", "T1", "T2", "T3", "B"}, types)
			reqs := fake.readRequests()
			require.Len(t, reqs, 2, "one subscription dropped, one resumed")
			pos := reqs[1].GetOptions().GetAll().GetPosition()
			assert.Equal(t, uint64(1000), pos.GetCommitPosition())
			assert.Equal(t, uint64(900), pos.GetPreparePosition(), "the prepare position as the server sent it")
		})
	}
}

// TestFanoutDeliversEveryEventOfALegacyTransaction: a follower of a shared
// subscription gets every event of a legacy transaction, though they share
// their commit position.
func TestFanoutDeliversEveryEventOfALegacyTransaction(t *testing.T) {
	events := []scriptedEvent{
		{stream: "task-t", typ: "T1", revision: 0, commit: 1000, prepare: 900, data: `{}`},
		{stream: "task-t", typ: "T2", revision: 1, commit: 1000, prepare: 950, data: `{}`},
		{stream: "task-b", typ: "B", revision: 0, commit: 1100, prepare: 1100, data: `{}`},
	}
	addr := startScripted(t, &scriptedStreams{read: subscriptionScript(events, nil)})
	s := dialStore(t, fmt.Sprintf("esdb://%s?tls=false", addr))
	fan := eventstore.NewFanout(s, "task-")
	feed := fan.Register("only")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() { _ = fan.Run(ctx) }()
	var types []string
	err := feed.SubscribeAll(ctx, domain.FromStart(), "task-", func(it domain.SubscriptionItem) error {
		if it.CaughtUp {
			return errEnough
		}
		types = append(types, it.Event.Type)
		return nil
	})
	require.ErrorIs(t, err, errEnough)
	assert.Equal(t, []string{"T1", "T2", "B"}, types)
}

// TestSystemEventsAreNotDelivered: with no prefix, a subscription to $all
// of a real server carries its own events ($-prefixed streams and types:
// stream metadata, statistics, links); the adapter delivers none of them,
// as the official client's ExcludeSystemEventsFilter would, on either path.
func TestSystemEventsAreNotDelivered(t *testing.T) {
	events := []scriptedEvent{
		{stream: "task-a", typ: "A", revision: 0, commit: 100, prepare: 100, data: `{}`},
		{stream: "$$task-a", typ: "$metadata", revision: 0, commit: 200, prepare: 200, data: `{"$maxCount":10}`},
		{stream: "$stats-127.0.0.1:2113", typ: "$statsCollected", revision: 0, commit: 300, prepare: 300, data: `{}`},
		{stream: "$et-A", typ: "$>", revision: 0, commit: 400, prepare: 400, data: `0@task-a`},
		{stream: "$scavenges", typ: "Foreign", revision: 0, commit: 450, prepare: 450, data: `{}`},
		{stream: "orders-b", typ: "B", revision: 0, commit: 500, prepare: 500, data: `{}`},
	}
	for path, suffix := range paths {
		t.Run(string(path), func(t *testing.T) {
			addr := startScripted(t, &scriptedStreams{read: subscriptionScript(events, nil)})
			var streams []string
			for _, e := range followScripted(t, addr, suffix, "") {
				streams = append(streams, e.Stream)
			}
			assert.Equal(t, []string{"task-a", "orders-b"}, streams)
		})
	}
	t.Run("in process", func(t *testing.T) {
		s := dialStore(t, "esdb://127.0.0.1:1?tls=false")
		s.SubscribeInProcess(func(ctx context.Context, _ uint64, _ bool, _ string, event func(eventstore.LocalRecorded) error, caughtUp func() error) error {
			for _, e := range events {
				if err := event(eventstore.LocalRecorded{Stream: e.stream, Type: e.typ, Data: []byte(e.data), Position: e.commit}); err != nil {
					return err
				}
			}
			return caughtUp()
		})
		var streams []string
		err := s.SubscribeAll(context.Background(), domain.FromStart(), "", func(it domain.SubscriptionItem) error {
			if it.CaughtUp {
				return errEnough
			}
			streams = append(streams, it.Event.Stream)
			return nil
		})
		require.ErrorIs(t, err, errEnough)
		assert.Equal(t, []string{"task-a", "orders-b"}, streams)
	})
}
