package esdbserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sagaengine/saga/adapters/esdbserver"
)

// caughtUpFields are the fields KurrentDB 24.10 added to ReadResp.CaughtUp,
// which the official client's older types keep as unknown fields.
type caughtUpFields struct {
	time        time.Time
	revision    int64
	hasRevision bool
	position    *shared.AllStreamPosition
}

// awaitCaughtUp reads a subscription until its caught-up answer and
// returns that answer's fields.
func awaitCaughtUp(t *testing.T, sub streams.Streams_ReadClient) caughtUpFields {
	t.Helper()
	for {
		m, err := sub.Recv()
		require.NoError(t, err)
		c := m.GetCaughtUp()
		if c == nil {
			continue
		}
		var out caughtUpFields
		b := c.ProtoReflect().GetUnknown()
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			require.GreaterOrEqual(t, n, 0)
			b = b[n:]
			switch {
			case num == 1 && typ == protowire.BytesType:
				v, n := protowire.ConsumeBytes(b)
				require.GreaterOrEqual(t, n, 0)
				var ts timestamppb.Timestamp
				require.NoError(t, proto.Unmarshal(v, &ts))
				out.time, b = ts.AsTime(), b[n:]
			case num == 2 && typ == protowire.VarintType:
				v, n := protowire.ConsumeVarint(b)
				require.GreaterOrEqual(t, n, 0)
				out.revision, out.hasRevision, b = int64(v), true, b[n:]
			case num == 3 && typ == protowire.BytesType:
				v, n := protowire.ConsumeBytes(b)
				require.GreaterOrEqual(t, n, 0)
				out.position = &shared.AllStreamPosition{}
				require.NoError(t, proto.Unmarshal(v, out.position))
				b = b[n:]
			default:
				t.Fatalf("unexpected field %d in CaughtUp", num)
			}
		}
		return out
	}
}

// TestCaughtUpCarriesTimeAndCheckpoint: a subscription's caught-up answer
// has the server's time (KurrentDB-Client-Go reports no CaughtUp without
// it) and the checkpoint KurrentDB 24.10 sends: for a stream the last
// revision sent or subscribed after (none for an empty stream from its
// start), for $all the last position (none from the start of an empty log).
func TestCaughtUpCarriesTimeAndCheckpoint(t *testing.T) {
	_, client, raw := startWith(t, esdbserver.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subscribe := func(opts *streams.ReadReq_Options) caughtUpFields {
		opts.ReadDirection = streams.ReadReq_Options_Forwards
		opts.CountOption = &streams.ReadReq_Options_Subscription{Subscription: &streams.ReadReq_Options_SubscriptionOptions{}}
		opts.FilterOption = &streams.ReadReq_Options_NoFilter{NoFilter: &shared.Empty{}}
		opts.UuidOption = &streams.ReadReq_Options_UUIDOption{Content: &streams.ReadReq_Options_UUIDOption_Structured{Structured: &shared.Empty{}}}
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		sub, err := raw.Read(sctx, &streams.ReadReq{Options: opts})
		require.NoError(t, err)
		return awaitCaughtUp(t, sub)
	}
	fromStart := func(name string) *streams.ReadReq_Options {
		return &streams.ReadReq_Options{StreamOption: &streams.ReadReq_Options_Stream{Stream: &streams.ReadReq_Options_StreamOptions{
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(name)},
			RevisionOption:   &streams.ReadReq_Options_StreamOptions_Start{Start: &shared.Empty{}},
		}}}
	}
	allFromStart := &streams.ReadReq_Options{StreamOption: &streams.ReadReq_Options_All{All: &streams.ReadReq_Options_AllOptions{
		AllOption: &streams.ReadReq_Options_AllOptions_Start{Start: &shared.Empty{}},
	}}}

	before := time.Now().Add(-time.Second)
	emptyLog := subscribe(allFromStart)
	assert.WithinRange(t, emptyLog.time, before, time.Now().Add(time.Second))
	assert.Nil(t, emptyLog.position, "no position in an empty log")
	empty := subscribe(fromStart(stream("none")))
	assert.WithinRange(t, empty.time, before, time.Now().Add(time.Second))
	assert.False(t, empty.hasRevision, "no revision for an empty stream")

	s := stream("caught")
	_, err := client.AppendToStream(ctx, s, esdb.AppendToStreamOptions{}, events(3, "E")...)
	require.NoError(t, err)
	got := subscribe(fromStart(s))
	assert.WithinRange(t, got.time, before, time.Now().Add(time.Second))
	assert.True(t, got.hasRevision)
	assert.Equal(t, int64(2), got.revision)
	assert.Nil(t, got.position)
	after := subscribe(&streams.ReadReq_Options{StreamOption: &streams.ReadReq_Options_Stream{Stream: &streams.ReadReq_Options_StreamOptions{
		StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(s)},
		RevisionOption:   &streams.ReadReq_Options_StreamOptions_Revision{Revision: 7},
	}}})
	assert.Equal(t, int64(7), after.revision, "the revision subscribed after")

	last, err := client.ReadAll(ctx, esdb.ReadAllOptions{Direction: esdb.Backwards, From: esdb.End{}}, 1)
	require.NoError(t, err)
	ev, err := last.Recv()
	require.NoError(t, err)
	last.Close()
	all := subscribe(allFromStart)
	assert.WithinRange(t, all.time, before, time.Now().Add(time.Second))
	assert.False(t, all.hasRevision)
	require.NotNil(t, all.position)
	assert.Equal(t, ev.OriginalEvent().Position.Commit, all.position.GetCommitPosition())
	assert.Equal(t, ev.OriginalEvent().Position.Commit, all.position.GetPreparePosition())
}
