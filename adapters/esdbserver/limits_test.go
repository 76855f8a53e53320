package esdbserver_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// startWith starts an embedded server with cfg and returns it with an
// official client and a raw gRPC client.
func startWith(t *testing.T, cfg esdbserver.Config) (*esdbserver.Server, *esdb.Client, streams.StreamsClient) {
	t.Helper()
	embeddedOnly(t)
	cfg.Listen, cfg.DataDir = "127.0.0.1:0", t.TempDir()
	srv, err := esdbserver.Start(cfg)
	require.NoError(t, err)
	client := connect(t, fmt.Sprintf("esdb://%s?tls=false", srv.Addr()))
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		_ = client.Close()
		require.NoError(t, srv.Close())
	})
	return srv, client, streams.NewStreamsClient(conn)
}

func allRead(count uint64, regex string) *streams.ReadReq {
	return &streams.ReadReq{Options: &streams.ReadReq_Options{
		StreamOption: &streams.ReadReq_Options_All{All: &streams.ReadReq_Options_AllOptions{AllOption: &streams.ReadReq_Options_AllOptions_Start{Start: &shared.Empty{}}}},
		CountOption:  &streams.ReadReq_Options_Count{Count: count},
		FilterOption: &streams.ReadReq_Options_Filter{Filter: &streams.ReadReq_Options_FilterOptions{
			Filter: &streams.ReadReq_Options_FilterOptions_StreamIdentifier{StreamIdentifier: &streams.ReadReq_Options_FilterOptions_Expression{Regex: regex}},
			Window: &streams.ReadReq_Options_FilterOptions_Max{Max: 32},
		}},
		UuidOption: &streams.ReadReq_Options_UUIDOption{Content: &streams.ReadReq_Options_UUIDOption_String_{String_: &shared.Empty{}}},
	}}
}

func allSubscription() *streams.ReadReq {
	return &streams.ReadReq{Options: &streams.ReadReq_Options{
		StreamOption: &streams.ReadReq_Options_All{All: &streams.ReadReq_Options_AllOptions{AllOption: &streams.ReadReq_Options_AllOptions_End{End: &shared.Empty{}}}},
		CountOption:  &streams.ReadReq_Options_Subscription{Subscription: &streams.ReadReq_Options_SubscriptionOptions{}},
		FilterOption: &streams.ReadReq_Options_NoFilter{NoFilter: &shared.Empty{}},
		UuidOption:   &streams.ReadReq_Options_UUIDOption{Content: &streams.ReadReq_Options_UUIDOption_String_{String_: &shared.Empty{}}},
	}}
}

// TestFilterRegexOverTheLimitIsRefused refuses a regex over the limit in a
// read and in a subscription with InvalidArgument saying so.
func TestFilterRegexOverTheLimitIsRefused(t *testing.T) {
	_, client, raw := startWith(t, esdbserver.Config{})
	long := strings.Repeat("a", esdbserver.DefaultMaxFilterRegex+1)
	r, err := raw.Read(ctx(t), allRead(10, long))
	require.NoError(t, err)
	_, err = r.Recv()
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Contains(t, err.Error(), "filter regex is 1001 bytes, over the limit of 1000")

	r, err = raw.Read(ctx(t), allRead(10, long[1:]))
	require.NoError(t, err)
	_, err = r.Recv()
	assert.Equal(t, io.EOF, err, "a regex at the limit is accepted")

	_, err = client.SubscribeToAll(ctx(t), esdb.SubscribeToAllOptions{Filter: &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Regex: long}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "over the limit of 1000")
}

// TestSubscriptionLimit serves MaxSubscriptions subscriptions and refuses
// one more with ResourceExhausted, until one of them ends.
func TestSubscriptionLimit(t *testing.T) {
	srv, client, raw := startWith(t, esdbserver.Config{MaxSubscriptions: 2})
	first, err := client.SubscribeToAll(ctx(t), esdb.SubscribeToAllOptions{From: esdb.End{}})
	require.NoError(t, err)
	second, err := client.SubscribeToStream(ctx(t), "s", esdb.SubscribeToStreamOptions{})
	require.NoError(t, err)
	defer second.Close()
	assert.Equal(t, 2, srv.Subscriptions())

	r, err := raw.Read(ctx(t), allSubscription())
	require.NoError(t, err)
	_, err = r.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Contains(t, err.Error(), "already serves 2 subscriptions")
	_, err = client.SubscribeToAll(ctx(t), esdb.SubscribeToAllOptions{})
	require.Error(t, err, "the official client sees the refusal too")

	// Reads are not subscriptions and are not limited.
	_, err = readStream(t, client, "s", esdb.ReadStreamOptions{}, 1)
	assert.Equal(t, esdb.ErrorCodeResourceNotFound, code(err))

	require.NoError(t, first.Close())
	require.Eventually(t, func() bool { return srv.Subscriptions() == 1 }, 10*time.Second, 5*time.Millisecond,
		"the server notices the closed subscription")
	third, err := client.SubscribeToAll(ctx(t), esdb.SubscribeToAllOptions{From: esdb.End{}})
	require.NoError(t, err, "a place is free again")
	require.NoError(t, third.Close())
}

// TestCheckpointAtLeastEverySearchWindow subscribes with a filter that
// matches nothing and a window larger than the server's search window: the
// server still sends a checkpoint every MaxSearchWindow examined events.
func TestCheckpointAtLeastEverySearchWindow(t *testing.T) {
	_, client, _ := startWith(t, esdbserver.Config{MaxSearchWindow: 500})
	name := stream("window")
	for i := 0; i < 30; i++ {
		_, err := client.AppendToStream(ctx(t), name, esdb.AppendToStreamOptions{}, events(100, "E")...)
		require.NoError(t, err)
	}
	sub, err := client.SubscribeToAll(ctx(t), esdb.SubscribeToAllOptions{
		From:            esdb.Start{},
		MaxSearchWindow: 100_000,
		Filter:          &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{"nothing-matches-"}},
	})
	require.NoError(t, err)
	defer sub.Close()
	got := collect(t, sub, 0, func(c *collected) bool { return c.caughtUp > 0 })
	assert.GreaterOrEqual(t, len(got.checkpoints), 3000/500, "a checkpoint per 500 examined events")
}

// TestReadsPagedByBytesLoseNothing reads large events with a small byte
// limit per page: every event arrives, in order, through the official
// client.
func TestReadsPagedByBytesLoseNothing(t *testing.T) {
	_, client, _ := startWith(t, esdbserver.Config{MaxReadBytes: 64 << 10})
	name := stream("bytes")
	big := make([]esdb.EventData, 20)
	for i := range big {
		big[i] = event("Big", fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("x", 30<<10)))
	}
	_, err := client.AppendToStream(ctx(t), name, esdb.AppendToStreamOptions{}, big...)
	require.NoError(t, err)
	got, err := readStream(t, client, name, esdb.ReadStreamOptions{}, 100)
	require.NoError(t, err)
	assert.Equal(t, []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, revisions(got))

	rs, err := client.ReadAll(ctx(t), esdb.ReadAllOptions{}, 100)
	require.NoError(t, err)
	defer rs.Close()
	n := 0
	for {
		if _, err := rs.Recv(); err != nil {
			break
		}
		n++
	}
	assert.Equal(t, 20, n)
}

// TestSlowFilterDoesNotHoldAppends runs a filtered $all read with a costly
// regex over 50,000 events while appending: appends do not wait for the
// scan, which matches the filter with the store's lock released.
func TestSlowFilterDoesNotHoldAppends(t *testing.T) {
	if testing.Short() {
		t.Skip("scans 50,000 events with a slow regex")
	}
	srv, client, raw := startWith(t, esdbserver.Config{})
	batch := make([]eslog.ProposedEvent, 500)
	for i := 0; i < 100; i++ {
		for j := range batch {
			batch[j] = eslog.ProposedEvent{ID: [16]byte{byte(i), byte(j), byte(j >> 8), 1}, Type: "E", Data: []byte(`{}`)}
		}
		_, err := srv.Store().Append(context.Background(), fmt.Sprintf("load-%d", i), eslog.Any, batch)
		require.NoError(t, err)
	}
	regex := strings.Repeat("(a|b)?", 150) + "z$"
	scanCtx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	var wg sync.WaitGroup
	var scan time.Duration
	var scanErr error
	started := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		begin := time.Now()
		r, err := raw.Read(scanCtx, allRead(1, regex))
		close(started)
		if err == nil {
			_, err = r.Recv()
		}
		scan, scanErr = time.Since(begin), err
	}()
	<-started
	var worst time.Duration
	for i := 0; i < 100; i++ {
		begin := time.Now()
		_, err := client.AppendToStream(ctx(t), stream("during"), esdb.AppendToStreamOptions{}, event("E", `{}`))
		require.NoError(t, err)
		worst = max(worst, time.Since(begin))
	}
	wg.Wait()
	t.Logf("filtered scan of 50,000 events: %v (%v); slowest of 100 appends during it: %v", scan, scanErr, worst)
	assert.Less(t, worst, 500*time.Millisecond)
}
