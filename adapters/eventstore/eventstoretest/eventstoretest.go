// Package eventstoretest is the contract of processes.EventStore as a test
// suite: every implementation of the port (the adapter against the embedded
// server or a real EventStoreDB, a fan-out's Feed) runs it with Run.
//
// It depends only on the domain and the port, and is imported only by tests.
// Each subtest writes streams of its own, named with a random prefix, so the
// suite can run against a shared server that holds other data.
package eventstoretest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// timeout bounds each store call and each wait of the suite.
const timeout = 20 * time.Second

// Run runs the contract's subtests, each with a store of its own from
// newStore. When the store also keeps checkpoints (processes.Checkpoints,
// processes.TaskCheckpoints), their contract runs too.
func Run(t *testing.T, newStore func(t *testing.T) processes.EventStore) {
	for _, tc := range []struct {
		name string
		test func(*testing.T, processes.EventStore)
	}{
		{"AppendNoStream", testAppendNoStream},
		{"AppendExactRevision", testAppendExactRevision},
		{"AppendAny", testAppendAny},
		{"RetriedAppendIsIdempotentDifferentOneConflicts", testRetriedAppend},
		{"ReadMissingStreamIsEmpty", testReadMissing},
		{"ReadStreamRoundTrips", testReadRoundTrip},
		{"SubscribeAllExistingThenLive", testSubscribeExistingThenLive},
		{"SubscribeAllFiltersByPrefix", testSubscribePrefix},
		{"SubscribeAllAfterPositionIsExclusive", testSubscribeAfterPosition},
		{"SubscribeAllEndsWithHandlerError", testSubscribeHandlerError},
		{"SubscribeAllEndsWithContext", testSubscribeCancel},
		{"Checkpoints", testCheckpoints},
		{"TaskCheckpoints", testTaskCheckpoints},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, newStore(t)) })
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return c
}

// unique returns a stream-name prefix no other test uses.
func unique(what string) string {
	return "contract-" + what + "-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16] + "-"
}

var meta = domain.EventMetadata{CorrelationID: "order-1", CausationID: "msg-1", Actor: "contract", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}

func event(typ string, n int) domain.NewEvent {
	return domain.NewEvent{Type: typ, Data: fmt.Appendf(nil, `{"n":%d}`, n), Metadata: meta}
}

func read(t *testing.T, s processes.EventStore, stream string) []domain.RecordedEvent {
	t.Helper()
	got, err := s.ReadStream(ctx(t), stream)
	require.NoError(t, err)
	return got
}

func types(events []domain.RecordedEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

func testAppendNoStream(t *testing.T, s processes.EventStore) {
	stream := unique("nostream") + "s"
	rev, err := s.Append(ctx(t), stream, domain.ExpectNoStream(), event("A", 0), event("B", 1))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), rev, "the revision of the last event appended")

	_, err = s.Append(ctx(t), stream, domain.ExpectNoStream(), event("C", 2))
	require.ErrorIs(t, err, domain.ErrConcurrencyConflict, "no-stream on an existing stream")
	assert.Equal(t, []string{"A", "B"}, types(read(t, s, stream)), "a conflicting append writes nothing")
}

func testAppendExactRevision(t *testing.T, s processes.EventStore) {
	stream := unique("exact") + "s"
	_, err := s.Append(ctx(t), stream, domain.ExpectRevision(0), event("A", 0))
	require.ErrorIs(t, err, domain.ErrConcurrencyConflict, "an exact revision of a missing stream")

	_, err = s.Append(ctx(t), stream, domain.ExpectNoStream(), event("A", 0))
	require.NoError(t, err)
	rev, err := s.Append(ctx(t), stream, domain.ExpectRevision(0), event("B", 1), event("C", 2))
	require.NoError(t, err)
	assert.Equal(t, uint64(2), rev)

	for _, stale := range []uint64{0, 1, 3, 7} {
		_, err = s.Append(ctx(t), stream, domain.ExpectRevision(stale), event("X", 9))
		require.ErrorIs(t, err, domain.ErrConcurrencyConflict, "expected revision %d of a stream at 2", stale)
	}
	rev, err = s.Append(ctx(t), stream, domain.ExpectAfter(2), event("D", 3))
	require.NoError(t, err)
	assert.Equal(t, uint64(3), rev)
	assert.Equal(t, []string{"A", "B", "C", "D"}, types(read(t, s, stream)))
}

func testAppendAny(t *testing.T, s processes.EventStore) {
	stream := unique("any") + "s"
	rev, err := s.Append(ctx(t), stream, domain.ExpectAny(), event("A", 0))
	require.NoError(t, err, "any on a missing stream")
	assert.Equal(t, uint64(0), rev)
	rev, err = s.Append(ctx(t), stream, domain.ExpectAny(), event("B", 1), event("C", 2))
	require.NoError(t, err, "any on an existing stream")
	assert.Equal(t, uint64(2), rev)
	assert.Equal(t, []string{"A", "B", "C"}, types(read(t, s, stream)))
}

// testRetriedAppend: events without ids get ids derived from stream,
// revision and content (domain.NewEvent), so an identical decision appended
// again at the same exact revision (a retry, by this or another instance) is
// recognised as written, and a different decision there conflicts.
func testRetriedAppend(t *testing.T, s processes.EventStore) {
	stream := unique("retry") + "s"
	_, err := s.Append(ctx(t), stream, domain.ExpectNoStream(), event("A", 0))
	require.NoError(t, err)
	decision := []domain.NewEvent{event("StepDispatched", 1), event("StepDispatched", 2)}
	rev, err := s.Append(ctx(t), stream, domain.ExpectRevision(0), decision...)
	require.NoError(t, err)
	again, err := s.Append(ctx(t), stream, domain.ExpectRevision(0), decision...)
	require.NoError(t, err, "the same decision retried is recognised as written")
	assert.Equal(t, rev, again)

	_, err = s.Append(ctx(t), stream, domain.ExpectRevision(0), event("StepDispatched", 3))
	require.ErrorIs(t, err, domain.ErrConcurrencyConflict, "a different decision at the same revision")
	assert.Len(t, read(t, s, stream), 3, "nothing written twice")

	// With ids of its own, a retried append is recognised by them.
	withID := event("Explicit", 4)
	withID.ID = uuid.NewString()
	rev, err = s.Append(ctx(t), stream, domain.ExpectRevision(2), withID)
	require.NoError(t, err)
	again, err = s.Append(ctx(t), stream, domain.ExpectRevision(2), withID)
	require.NoError(t, err)
	assert.Equal(t, rev, again)
	got := read(t, s, stream)
	require.Len(t, got, 4)
	assert.Equal(t, withID.ID, got[3].ID, "an event's own id is kept")
}

func testReadMissing(t *testing.T, s processes.EventStore) {
	got, err := s.ReadStream(ctx(t), unique("missing")+"s")
	require.NoError(t, err)
	assert.Empty(t, got)
}

func testReadRoundTrip(t *testing.T, s processes.EventStore) {
	stream := unique("read") + "s"
	before := time.Now()
	want := []domain.NewEvent{event("A", 0), event("B", 1), {Type: "C", Data: []byte(`{"s":"ünïcode"}`), Metadata: domain.EventMetadata{Actor: "other"}}}
	_, err := s.Append(ctx(t), stream, domain.ExpectNoStream(), want[:2]...)
	require.NoError(t, err)
	_, err = s.Append(ctx(t), stream, domain.ExpectRevision(1), want[2])
	require.NoError(t, err)

	got := read(t, s, stream)
	require.Len(t, got, len(want))
	ids := map[string]bool{}
	for i, e := range got {
		assert.Equal(t, stream, e.Stream)
		assert.Equal(t, uint64(i), e.Revision)
		assert.Equal(t, want[i].Type, e.Type)
		assert.JSONEq(t, string(want[i].Data), string(e.Data))
		assert.Equal(t, want[i].Metadata, e.Metadata)
		assert.NotEmpty(t, e.ID)
		ids[e.ID] = true
		assert.WithinDuration(t, before, e.Recorded, time.Minute)
		if i > 0 {
			assert.Greater(t, e.Position, got[i-1].Position, "positions increase along a stream")
		}
	}
	assert.Len(t, ids, len(want), "event ids are distinct")
}

// subscription runs SubscribeAll in the background, passing what it
// delivers on.
type subscription struct {
	items  chan domain.SubscriptionItem
	done   chan error
	cancel context.CancelFunc
}

func subscribe(t *testing.T, s processes.EventStore, from domain.SubscribeFrom, prefix string) *subscription {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 3*timeout)
	sub := &subscription{items: make(chan domain.SubscriptionItem, 1024), done: make(chan error, 1), cancel: cancel}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sub.done <- s.SubscribeAll(c, from, prefix, func(it domain.SubscriptionItem) error {
			select {
			case sub.items <- it:
				return nil
			case <-c.Done():
				return c.Err()
			}
		})
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return sub
}

// next returns the next event delivered, skipping caught-up notices (a
// subscription may report caught-up more than once).
func (sub *subscription) next(t *testing.T) domain.RecordedEvent {
	t.Helper()
	for {
		select {
		case it := <-sub.items:
			if it.Event != nil {
				return *it.Event
			}
		case err := <-sub.done:
			t.Fatalf("the subscription ended: %v", err)
		case <-time.After(timeout):
			t.Fatal("no event delivered")
		}
	}
}

// caughtUp returns the events delivered before the subscription reported
// caught-up.
func (sub *subscription) caughtUp(t *testing.T) []domain.RecordedEvent {
	t.Helper()
	var got []domain.RecordedEvent
	for {
		select {
		case it := <-sub.items:
			if it.CaughtUp {
				return got
			}
			if it.Event != nil {
				got = append(got, *it.Event)
			}
		case err := <-sub.done:
			t.Fatalf("the subscription ended: %v", err)
		case <-time.After(timeout):
			t.Fatalf("not caught up after %d events", len(got))
		}
	}
}

// quiet checks that nothing more is delivered for a moment.
func (sub *subscription) quiet(t *testing.T) {
	t.Helper()
	deadline := time.After(300 * time.Millisecond)
	for {
		select {
		case it := <-sub.items:
			if it.Event != nil {
				t.Fatalf("unexpected event %s/%d", it.Event.Stream, it.Event.Revision)
			}
		case <-deadline:
			return
		}
	}
}

type ref struct {
	Stream   string
	Revision uint64
}

func refs(events []domain.RecordedEvent) []ref {
	out := make([]ref, len(events))
	for i, e := range events {
		out[i] = ref{e.Stream, e.Revision}
	}
	return out
}

func assertIncreasing(t *testing.T, events []domain.RecordedEvent) {
	t.Helper()
	for i := 1; i < len(events); i++ {
		assert.Greater(t, events[i].Position, events[i-1].Position, "positions increase in delivery order")
	}
}

func testSubscribeExistingThenLive(t *testing.T, s processes.EventStore) {
	prefix := unique("live")
	a, b := prefix+"a", prefix+"b"
	_, err := s.Append(ctx(t), a, domain.ExpectNoStream(), event("A", 0))
	require.NoError(t, err)
	_, err = s.Append(ctx(t), b, domain.ExpectNoStream(), event("B", 0))
	require.NoError(t, err)
	_, err = s.Append(ctx(t), a, domain.ExpectRevision(0), event("A", 1))
	require.NoError(t, err)

	sub := subscribe(t, s, domain.FromStart(), prefix)
	existing := sub.caughtUp(t)
	assert.Equal(t, []ref{{a, 0}, {b, 0}, {a, 1}}, refs(existing), "existing events in the order appended, then caught-up")

	_, err = s.Append(ctx(t), b, domain.ExpectRevision(0), event("B", 1))
	require.NoError(t, err)
	_, err = s.Append(ctx(t), a, domain.ExpectRevision(1), event("A", 2), event("A", 3))
	require.NoError(t, err)
	live := []domain.RecordedEvent{sub.next(t), sub.next(t), sub.next(t)}
	assert.Equal(t, []ref{{b, 1}, {a, 2}, {a, 3}}, refs(live), "live events in the order appended")
	all := append(existing, live...)
	assertIncreasing(t, all)
	assert.Equal(t, meta, all[4].Metadata)
	assert.JSONEq(t, `{"n":2}`, string(all[4].Data))
	sub.quiet(t)
}

func testSubscribePrefix(t *testing.T, s processes.EventStore) {
	prefix := unique("prefix")
	mine := prefix + "x"
	others := []string{strings.TrimSuffix(prefix, "-"), "other" + prefix + "x", unique("prefix") + "x"}
	for i, other := range others {
		_, err := s.Append(ctx(t), mine, domain.ExpectAny(), event("Mine", i))
		require.NoError(t, err)
		_, err = s.Append(ctx(t), other, domain.ExpectAny(), event("Other", i))
		require.NoError(t, err)
	}
	sub := subscribe(t, s, domain.FromStart(), prefix)
	existing := sub.caughtUp(t)
	assert.Equal(t, []ref{{mine, 0}, {mine, 1}, {mine, 2}}, refs(existing), "only streams starting with the prefix")

	for _, other := range others {
		_, err := s.Append(ctx(t), other, domain.ExpectAny(), event("Other", 9))
		require.NoError(t, err)
	}
	_, err := s.Append(ctx(t), mine, domain.ExpectRevision(2), event("Mine", 3))
	require.NoError(t, err)
	assert.Equal(t, ref{mine, 3}, refs([]domain.RecordedEvent{sub.next(t)})[0], "live events are filtered too")
	sub.quiet(t)
}

func testSubscribeAfterPosition(t *testing.T, s processes.EventStore) {
	prefix := unique("after")
	stream := prefix + "s"
	_, err := s.Append(ctx(t), stream, domain.ExpectNoStream(), event("E", 0), event("E", 1), event("E", 2))
	require.NoError(t, err)
	written := read(t, s, stream)
	require.Len(t, written, 3)

	sub := subscribe(t, s, domain.AfterPosition(written[0].Position), prefix)
	got := sub.caughtUp(t)
	assert.Equal(t, []ref{{stream, 1}, {stream, 2}}, refs(got), "a checkpoint resumes strictly after itself")
	for i, e := range got {
		assert.Equal(t, written[i+1].Position, e.Position, "the positions ReadStream reports")
		assert.Equal(t, written[i+1].ID, e.ID)
	}

	last := subscribe(t, s, domain.AfterPosition(written[2].Position), prefix)
	assert.Empty(t, last.caughtUp(t), "nothing after the last event")
	_, err = s.Append(ctx(t), stream, domain.ExpectRevision(2), event("E", 3))
	require.NoError(t, err)
	assert.Equal(t, ref{stream, 3}, refs([]domain.RecordedEvent{last.next(t)})[0])
	assert.Equal(t, ref{stream, 3}, refs([]domain.RecordedEvent{sub.next(t)})[0])
}

func testSubscribeHandlerError(t *testing.T, s processes.EventStore) {
	prefix := unique("fail")
	_, err := s.Append(ctx(t), prefix+"s", domain.ExpectNoStream(), event("E", 0), event("E", 1))
	require.NoError(t, err)
	stop := errors.New("handler failed")
	calls := 0
	err = s.SubscribeAll(ctx(t), domain.FromStart(), prefix, func(it domain.SubscriptionItem) error {
		calls++
		if it.Event != nil {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop, "the handler's error ends the subscription")
	assert.Equal(t, 1, calls, "nothing is delivered after the handler failed")

	calls = 0
	err = s.SubscribeAll(ctx(t), domain.FromStart(), prefix, func(it domain.SubscriptionItem) error {
		calls++
		if it.CaughtUp {
			return stop
		}
		return nil
	})
	require.ErrorIs(t, err, stop, "an error handling caught-up ends it too")
	assert.Equal(t, 3, calls)
}

func testSubscribeCancel(t *testing.T, s processes.EventStore) {
	prefix := unique("cancel")
	_, err := s.Append(ctx(t), prefix+"s", domain.ExpectNoStream(), event("E", 0))
	require.NoError(t, err)
	sub := subscribe(t, s, domain.FromStart(), prefix)
	require.Len(t, sub.caughtUp(t), 1)
	sub.cancel()
	select {
	case err := <-sub.done:
		assert.ErrorIs(t, err, context.Canceled, "ends with the context's error")
	case <-time.After(timeout):
		t.Fatal("the subscription went on after its context ended")
	}

	// A context that ends while the handler is busy ends it too.
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.SubscribeAll(c, domain.FromStart(), prefix, func(domain.SubscriptionItem) error {
			cancel()
			return nil
		})
	}()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(timeout):
		cancel()
		t.Fatal("the subscription went on after its context ended")
	}
}

func testCheckpoints(t *testing.T, s processes.EventStore) {
	cp, ok := s.(processes.Checkpoints)
	if !ok {
		t.Skip("the store keeps no checkpoints")
	}
	name := strings.TrimSuffix(unique("cp"), "-")
	_, found, err := cp.LoadCheckpoint(ctx(t), name)
	require.NoError(t, err)
	assert.False(t, found, "no checkpoint saved yet")
	for _, p := range []uint64{7, 42, 3} {
		require.NoError(t, cp.SaveCheckpoint(ctx(t), name, p))
	}
	pos, found, err := cp.LoadCheckpoint(ctx(t), name)
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, uint64(3), pos, "the newest saved, not the largest")
}

func testTaskCheckpoints(t *testing.T, s processes.EventStore) {
	cp, ok := s.(processes.TaskCheckpoints)
	if !ok {
		t.Skip("the store keeps no task checkpoints")
	}
	name := strings.TrimSuffix(unique("tcp"), "-")
	_, found, err := cp.LoadTaskCheckpoint(ctx(t), name)
	require.NoError(t, err)
	assert.False(t, found, "no checkpoint saved yet")
	require.NoError(t, cp.SaveTaskCheckpoint(ctx(t), name, domain.TaskCheckpoint{Position: 9, Tasks: []string{"a", "b"}}))
	require.NoError(t, cp.SaveTaskCheckpoint(ctx(t), name, domain.TaskCheckpoint{Position: 5, Tasks: []string{"c"}}))
	got, found, err := cp.LoadTaskCheckpoint(ctx(t), name)
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, domain.TaskCheckpoint{Position: 5, Tasks: []string{"c"}}, got)
}
