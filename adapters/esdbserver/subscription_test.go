package esdbserver_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
)

// collect reads from sub until n events arrived, returning them and whether
// caught-up was seen before the first live event.
type collected struct {
	events      []*esdb.RecordedEvent
	checkpoints []esdb.Position
	caughtUp    int
}

func collect(t *testing.T, sub *esdb.Subscription, n int, until func(*collected) bool) *collected {
	t.Helper()
	out := &collected{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev := sub.Recv()
			switch {
			case ev.SubscriptionDropped != nil:
				return
			case ev.EventAppeared != nil:
				out.events = append(out.events, ev.EventAppeared.Event)
			case ev.CheckPointReached != nil:
				out.checkpoints = append(out.checkpoints, *ev.CheckPointReached)
			case ev.CaughtUp != nil:
				out.caughtUp++
			}
			if len(out.events) >= n && (until == nil || until(out)) {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = sub.Close()
		<-done
		t.Fatalf("subscription delivered %d of %d events", len(out.events), n)
	}
	return out
}

func TestSubscribeToStreamCatchUpThenLive(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	s := stream("sub")
	_, err := c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{}, events(5, "E")...)
	require.NoError(t, err)

	sub, err := c.SubscribeToStream(ctx(t), s, esdb.SubscribeToStreamOptions{From: esdb.Start{}})
	require.NoError(t, err)
	defer sub.Close()
	fromRev, err := c.SubscribeToStream(ctx(t), s, esdb.SubscribeToStreamOptions{From: esdb.Revision(2)})
	require.NoError(t, err)
	defer fromRev.Close()

	_, err = c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{}, events(3, "E")...)
	require.NoError(t, err)
	got := collect(t, sub, 8, nil)
	assert.Equal(t, []uint64{0, 1, 2, 3, 4, 5, 6, 7}, recordedRevisions(got.events))
	assert.Equal(t, 1, got.caughtUp)
	after := collect(t, fromRev, 5, nil)
	assert.Equal(t, []uint64{3, 4, 5, 6, 7}, recordedRevisions(after.events), "subscribing from a revision excludes it")
}

func TestSubscribeToStreamThatDoesNotExistYet(t *testing.T) {
	tg := newTarget(t)
	s := stream("later")
	sub, err := tg.client.SubscribeToStream(ctx(t), s, esdb.SubscribeToStreamOptions{From: esdb.Start{}})
	require.NoError(t, err)
	defer sub.Close()
	_, err = tg.client.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{}, events(2, "E")...)
	require.NoError(t, err)
	got := collect(t, sub, 2, nil)
	assert.Equal(t, []uint64{0, 1}, recordedRevisions(got.events))
}

func TestSubscribeToAllFilters(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	run := uuid.NewString()[:8]
	orders, payments := "order"+run+"-", "payment"+run+"-"
	for i := 0; i < 40; i++ {
		_, err := c.AppendToStream(ctx(t), fmt.Sprintf("%s%d", orders, i), esdb.AppendToStreamOptions{}, event("OrderPlaced"+run, `{}`))
		require.NoError(t, err)
		_, err = c.AppendToStream(ctx(t), fmt.Sprintf("%s%d", payments, i), esdb.AppendToStreamOptions{}, event("PaymentTaken"+run, `{}`))
		require.NoError(t, err)
	}
	cases := []struct {
		name   string
		filter *esdb.SubscriptionFilter
		want   func(*esdb.RecordedEvent) bool
	}{
		{"stream prefix", &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{orders}},
			func(e *esdb.RecordedEvent) bool { return strings.HasPrefix(e.StreamID, orders) }},
		{"stream regex", &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Regex: "^payment" + run + "-[0-9]*7$"},
			func(e *esdb.RecordedEvent) bool {
				return strings.HasPrefix(e.StreamID, payments) && strings.HasSuffix(e.StreamID, "7")
			}},
		{"event type prefix", &esdb.SubscriptionFilter{Type: esdb.EventFilterType, Prefixes: []string{"PaymentTaken" + run}},
			func(e *esdb.RecordedEvent) bool { return e.EventType == "PaymentTaken"+run }},
		{"event type regex", &esdb.SubscriptionFilter{Type: esdb.EventFilterType, Regex: "^OrderPlaced" + run + "$"},
			func(e *esdb.RecordedEvent) bool { return e.EventType == "OrderPlaced"+run }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := 40
			if tc.name == "stream regex" {
				want = 4 // 7, 17, 27, 37
			}
			sub, err := c.SubscribeToAll(ctx(t), esdb.SubscribeToAllOptions{From: esdb.Start{}, Filter: tc.filter, MaxSearchWindow: 10})
			require.NoError(t, err)
			defer sub.Close()
			got := collect(t, sub, want, func(c *collected) bool { return c.caughtUp > 0 })
			require.Len(t, got.events, want)
			for _, e := range got.events {
				assert.True(t, tc.want(e), "unexpected %s in %s", e.EventType, e.StreamID)
			}
			assert.NotEmpty(t, got.checkpoints, "filtered subscriptions report checkpoints")
			for i := 1; i < len(got.checkpoints); i++ {
				assert.GreaterOrEqual(t, got.checkpoints[i].Commit, got.checkpoints[i-1].Commit)
			}
		})
	}
}

func TestSubscribeToAllFromPositionAndEnd(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	prefix := "pos" + uuid.NewString()[:8] + "-"
	filter := &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{prefix}}
	first, err := c.AppendToStream(ctx(t), prefix+"a", esdb.AppendToStreamOptions{}, event("E", `{}`))
	require.NoError(t, err)
	_, err = c.AppendToStream(ctx(t), prefix+"b", esdb.AppendToStreamOptions{}, event("E", `{}`))
	require.NoError(t, err)

	fromPos, err := c.SubscribeToAll(ctx(t), esdb.SubscribeToAllOptions{
		From: esdb.Position{Commit: first.CommitPosition, Prepare: first.PreparePosition}, Filter: filter})
	require.NoError(t, err)
	defer fromPos.Close()
	fromEnd, err := c.SubscribeToAll(ctx(t), esdb.SubscribeToAllOptions{From: esdb.End{}, Filter: filter})
	require.NoError(t, err)
	defer fromEnd.Close()
	// An empty result proves the end subscription is registered: wait for its
	// caught-up before appending.
	collect(t, fromEnd, 0, func(c *collected) bool { return c.caughtUp > 0 })

	_, err = c.AppendToStream(ctx(t), prefix+"c", esdb.AppendToStreamOptions{}, event("E", `{}`))
	require.NoError(t, err)
	got := collect(t, fromPos, 2, nil)
	assert.Equal(t, []string{prefix + "b", prefix + "c"}, streamIDs(got.events), "a position subscription excludes the position")
	live := collect(t, fromEnd, 1, nil)
	assert.Equal(t, []string{prefix + "c"}, streamIDs(live.events))
}

// TestCatchUpToLiveHandOverUnderConcurrentAppends checks the hardest property
// of a catch-up subscription: while writers append, a subscriber started in
// the middle sees every event exactly once and in $all order.
func TestCatchUpToLiveHandOverUnderConcurrentAppends(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	prefix := "race" + uuid.NewString()[:8] + "-"
	const writers, perWriter = 8, 150
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			<-start
			for i := 0; i < perWriter; i++ {
				_, err := c.AppendToStream(ctx(t), fmt.Sprintf("%s%d", prefix, w), esdb.AppendToStreamOptions{}, event("E", `{}`))
				assert.NoError(t, err)
			}
		}(w)
	}
	close(start)
	var subs []*esdb.Subscription
	for i := 0; i < 4; i++ { // subscribers join while the writers are busy
		sub, err := c.SubscribeToAll(ctx(t), esdb.SubscribeToAllOptions{From: esdb.Start{},
			Filter: &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{prefix}}})
		require.NoError(t, err)
		defer sub.Close()
		subs = append(subs, sub)
	}
	wg.Wait()
	for _, sub := range subs {
		got := collect(t, sub, writers*perWriter, nil)
		require.Len(t, got.events, writers*perWriter)
		seen := map[uuid.UUID]bool{}
		next := map[string]uint64{}
		for i, e := range got.events {
			assert.False(t, seen[e.EventID], "duplicate event")
			seen[e.EventID] = true
			assert.Equal(t, next[e.StreamID], e.EventNumber, "gap or reorder in %s", e.StreamID)
			next[e.StreamID] = e.EventNumber + 1
			if i > 0 {
				assert.Greater(t, e.Position.Commit, got.events[i-1].Position.Commit)
			}
		}
	}
}

func recordedRevisions(evs []*esdb.RecordedEvent) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.EventNumber
	}
	return out
}

func streamIDs(evs []*esdb.RecordedEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.StreamID
	}
	return out
}

// TestSubscribeToAllCatchesUpOverManyPages catches up over a backlog of
// several full pages, and of pages cut short by the byte limit, with
// events of varied streams, types and sizes: every event arrives once, in
// order, with its own data, type and metadata, then the subscription is
// caught up and goes on live.
func TestSubscribeToAllCatchesUpOverManyPages(t *testing.T) {
	_, client, _ := startWith(t, esdbserver.Config{MaxReadBytes: 256 << 10})
	prefix := "pages" + uuid.NewString()[:8] + "-"
	const appends, perAppend = 50, 130
	var want []string
	for a := 0; a < appends; a++ {
		batch := make([]esdb.EventData, perAppend)
		for i := range batch {
			n := a*perAppend + i
			data := fmt.Sprintf(`{"n":%d,"pad":"%s"}`, n, strings.Repeat("x", n%7*300))
			batch[i] = esdb.EventData{EventType: fmt.Sprintf("T%d", n%3), ContentType: esdb.ContentTypeJson,
				Data: []byte(data), Metadata: []byte(fmt.Sprintf(`{"m":%d}`, n))}
			want = append(want, data)
		}
		_, err := client.AppendToStream(ctx(t), fmt.Sprintf("%s%d", prefix, a%4), esdb.AppendToStreamOptions{}, batch...)
		require.NoError(t, err)
	}
	sub, err := client.SubscribeToAll(ctx(t), esdb.SubscribeToAllOptions{From: esdb.Start{},
		Filter: &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{prefix}}})
	require.NoError(t, err)
	defer sub.Close()
	got := collect(t, sub, len(want), func(c *collected) bool { return c.caughtUp > 0 })
	require.Len(t, got.events, len(want))
	for i, e := range got.events {
		require.Equal(t, want[i], string(e.Data), "event %d", i)
		require.Equal(t, fmt.Sprintf("T%d", i%3), e.EventType, "event %d", i)
		require.Equal(t, fmt.Sprintf(`{"m":%d}`, i), string(e.UserMetadata), "event %d", i)
		require.Equal(t, fmt.Sprintf("%s%d", prefix, i/perAppend%4), e.StreamID, "event %d", i)
		if i > 0 {
			require.Greater(t, e.Position.Commit, got.events[i-1].Position.Commit)
		}
	}
	_, err = client.AppendToStream(ctx(t), prefix+"live", esdb.AppendToStreamOptions{}, event("Live", `{}`))
	require.NoError(t, err)
	live := collect(t, sub, 1, nil)
	require.Equal(t, prefix+"live", live.events[0].StreamID)
}
