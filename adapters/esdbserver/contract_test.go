package esdbserver_test

import (
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendExpectedRevisions(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	s := stream("append")

	res, err := c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, events(2, "Made")...)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), res.NextExpectedVersion)
	assert.NotZero(t, res.CommitPosition)

	_, err = c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, event("Made", `{}`))
	assert.Equal(t, esdb.ErrorCodeWrongExpectedVersion, code(err), "no_stream on an existing stream")

	_, err = c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(0)}, event("Made", `{}`))
	assert.Equal(t, esdb.ErrorCodeWrongExpectedVersion, code(err), "stale exact revision")

	res, err = c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(1)}, event("Made", `{}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(2), res.NextExpectedVersion)

	res, err = c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{ExpectedRevision: esdb.StreamExists{}}, event("Made", `{}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(3), res.NextExpectedVersion)

	res, err = c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{ExpectedRevision: esdb.Any{}}, event("Made", `{}`))
	require.NoError(t, err)
	assert.Equal(t, uint64(4), res.NextExpectedVersion)

	_, err = c.AppendToStream(ctx(t), stream("missing"), esdb.AppendToStreamOptions{ExpectedRevision: esdb.StreamExists{}}, event("Made", `{}`))
	assert.Equal(t, esdb.ErrorCodeWrongExpectedVersion, code(err), "stream_exists on a missing stream")

	_, err = c.AppendToStream(ctx(t), stream("missing"), esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(0)}, event("Made", `{}`))
	assert.Equal(t, esdb.ErrorCodeWrongExpectedVersion, code(err), "exact revision on a missing stream")

	got, err := readStream(t, c, s, esdb.ReadStreamOptions{}, 100)
	require.NoError(t, err)
	assert.Equal(t, []uint64{0, 1, 2, 3, 4}, revisions(got))
}

func TestIdempotentAppend(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	s := stream("idem")
	batch := events(3, "Made")

	first, err := c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, batch...)
	require.NoError(t, err)
	again, err := c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, batch...)
	require.NoError(t, err, "a retry with the same ids succeeds")
	assert.Equal(t, first.NextExpectedVersion, again.NextExpectedVersion)
	_, err = c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{ExpectedRevision: esdb.Any{}}, batch...)
	require.NoError(t, err)

	got, err := readStream(t, c, s, esdb.ReadStreamOptions{}, 100)
	require.NoError(t, err)
	assert.Len(t, got, 3, "no duplicates were written")
	for i, e := range got {
		assert.Equal(t, batch[i].EventID, e.Event.EventID)
	}
}

func TestReadStream(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	s := stream("read")
	written := events(1200, "Counted")
	_, err := c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{}, written...)
	require.NoError(t, err)

	all, err := readStream(t, c, s, esdb.ReadStreamOptions{}, 10_000)
	require.NoError(t, err)
	require.Len(t, all, 1200, "reads span several pages")
	for i, e := range all {
		assert.Equal(t, uint64(i), e.Event.EventNumber)
		assert.Equal(t, written[i].EventID, e.Event.EventID)
		assert.Equal(t, written[i].Data, e.Event.Data)
		assert.Equal(t, "Counted", e.Event.EventType)
		assert.Equal(t, s, e.Event.StreamID)
		assert.WithinDuration(t, time.Now(), e.Event.CreatedDate, time.Minute)
	}

	got, err := readStream(t, c, s, esdb.ReadStreamOptions{From: esdb.Revision(10)}, 3)
	require.NoError(t, err)
	assert.Equal(t, []uint64{10, 11, 12}, revisions(got))

	got, err = readStream(t, c, s, esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.End{}}, 3)
	require.NoError(t, err)
	assert.Equal(t, []uint64{1199, 1198, 1197}, revisions(got))

	got, err = readStream(t, c, s, esdb.ReadStreamOptions{Direction: esdb.Backwards, From: esdb.Revision(5)}, 100)
	require.NoError(t, err)
	assert.Equal(t, []uint64{5, 4, 3, 2, 1, 0}, revisions(got))

	got, err = readStream(t, c, s, esdb.ReadStreamOptions{From: esdb.Revision(5000)}, 10)
	require.NoError(t, err)
	assert.Empty(t, got, "reading past the end of a stream is empty, not an error")

	_, err = readStream(t, c, stream("nothing"), esdb.ReadStreamOptions{}, 10)
	assert.Equal(t, esdb.ErrorCodeResourceNotFound, code(err))
}

func TestReadAllAndPositionsSurviveRestart(t *testing.T) {
	embeddedOnly(t)
	tg := newTarget(t)
	a, b := stream("all-a"), stream("all-b")
	for i := 0; i < 5; i++ {
		_, err := tg.client.AppendToStream(ctx(t), a, esdb.AppendToStreamOptions{}, event("A", `{}`))
		require.NoError(t, err)
		_, err = tg.client.AppendToStream(ctx(t), b, esdb.AppendToStreamOptions{}, events(2, "B")...)
		require.NoError(t, err)
	}
	readAll := func(opts esdb.ReadAllOptions, count uint64) []*esdb.ResolvedEvent {
		rs, err := tg.client.ReadAll(ctx(t), opts, count)
		require.NoError(t, err)
		defer rs.Close()
		var out []*esdb.ResolvedEvent
		for {
			e, err := rs.Recv()
			if err != nil {
				return out
			}
			out = append(out, e)
		}
	}
	forwards := readAll(esdb.ReadAllOptions{From: esdb.Start{}}, 1000)
	require.Len(t, forwards, 15)
	for i := 1; i < len(forwards); i++ {
		assert.Greater(t, forwards[i].Event.Position.Commit, forwards[i-1].Event.Position.Commit, "positions increase")
	}
	backwards := readAll(esdb.ReadAllOptions{Direction: esdb.Backwards, From: esdb.End{}}, 1000)
	require.Len(t, backwards, 15)
	for i := range backwards {
		assert.Equal(t, forwards[len(forwards)-1-i].Event.EventID, backwards[i].Event.EventID)
	}
	mid := forwards[7].Event.Position
	fromMid := readAll(esdb.ReadAllOptions{From: mid}, 3)
	require.Len(t, fromMid, 3)
	assert.Equal(t, forwards[7].Event.EventID, fromMid[0].Event.EventID, "forwards from a position includes it")
	beforeMid := readAll(esdb.ReadAllOptions{Direction: esdb.Backwards, From: mid}, 2)
	require.Len(t, beforeMid, 2)
	assert.Equal(t, forwards[6].Event.EventID, beforeMid[0].Event.EventID, "backwards from a position starts before it")
	assert.Empty(t, readAll(esdb.ReadAllOptions{From: esdb.End{}}, 10))

	tg.restart()
	after := readAll(esdb.ReadAllOptions{From: esdb.Start{}}, 1000)
	require.Len(t, after, 15)
	for i := range after {
		assert.Equal(t, forwards[i].Event.EventID, after[i].Event.EventID)
		assert.Equal(t, forwards[i].Event.Position, after[i].Event.Position, "position stable across restart")
		assert.Equal(t, forwards[i].Event.EventNumber, after[i].Event.EventNumber)
	}
	res, err := tg.client.AppendToStream(ctx(t), a, esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(4)}, event("A", `{}`))
	require.NoError(t, err, "revisions continue after restart")
	assert.Equal(t, uint64(5), res.NextExpectedVersion)
}

func TestSoftDeleteAndTombstone(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	s := stream("soft")
	_, err := c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{}, events(3, "E")...)
	require.NoError(t, err)

	_, err = c.DeleteStream(ctx(t), s, esdb.DeleteStreamOptions{ExpectedRevision: esdb.Revision(0)})
	assert.Error(t, err, "delete with a stale revision fails")
	_, err = c.DeleteStream(ctx(t), s, esdb.DeleteStreamOptions{ExpectedRevision: esdb.Revision(2)})
	require.NoError(t, err)
	_, err = readStream(t, c, s, esdb.ReadStreamOptions{}, 10)
	assert.Equal(t, esdb.ErrorCodeResourceNotFound, code(err), "a soft-deleted stream reads as not found")

	_, err = c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, event("E", `{}`))
	require.NoError(t, err, "a soft-deleted stream can be written again")
	got, err := readStream(t, c, s, esdb.ReadStreamOptions{}, 10)
	require.NoError(t, err)
	assert.Equal(t, []uint64{3}, revisions(got), "revisions continue after a soft delete")

	h := stream("hard")
	_, err = c.AppendToStream(ctx(t), h, esdb.AppendToStreamOptions{}, events(2, "E")...)
	require.NoError(t, err)
	_, err = c.TombstoneStream(ctx(t), h, esdb.TombstoneStreamOptions{ExpectedRevision: esdb.Revision(1)})
	require.NoError(t, err)
	_, err = readStream(t, c, h, esdb.ReadStreamOptions{}, 10)
	assert.Equal(t, esdb.ErrorCodeStreamDeleted, code(err))
	_, err = c.AppendToStream(ctx(t), h, esdb.AppendToStreamOptions{}, event("E", `{}`))
	assert.Equal(t, esdb.ErrorCodeStreamDeleted, code(err))
	_, err = c.TombstoneStream(ctx(t), h, esdb.TombstoneStreamOptions{})
	assert.Equal(t, esdb.ErrorCodeStreamDeleted, code(err))
	_, err = c.DeleteStream(ctx(t), h, esdb.DeleteStreamOptions{})
	assert.Equal(t, esdb.ErrorCodeStreamDeleted, code(err))
}

func TestTombstoneSurvivesRestart(t *testing.T) {
	embeddedOnly(t)
	tg := newTarget(t)
	h, soft := stream("hard"), stream("soft")
	_, err := tg.client.AppendToStream(ctx(t), h, esdb.AppendToStreamOptions{}, event("E", `{}`))
	require.NoError(t, err)
	_, err = tg.client.AppendToStream(ctx(t), soft, esdb.AppendToStreamOptions{}, event("E", `{}`))
	require.NoError(t, err)
	_, err = tg.client.TombstoneStream(ctx(t), h, esdb.TombstoneStreamOptions{})
	require.NoError(t, err)
	_, err = tg.client.DeleteStream(ctx(t), soft, esdb.DeleteStreamOptions{})
	require.NoError(t, err)
	tg.restart()
	_, err = readStream(t, tg.client, h, esdb.ReadStreamOptions{}, 10)
	assert.Equal(t, esdb.ErrorCodeStreamDeleted, code(err))
	_, err = readStream(t, tg.client, soft, esdb.ReadStreamOptions{}, 10)
	assert.Equal(t, esdb.ErrorCodeResourceNotFound, code(err))
}

func TestStreamMetadata(t *testing.T) {
	tg := newTarget(t)
	c := tg.client
	s := stream("meta")
	_, err := c.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{}, events(10, "E")...)
	require.NoError(t, err)

	var meta esdb.StreamMetadata
	meta.SetMaxCount(3)
	meta.AddCustomProperty("owner", "saga")
	_, err = c.SetStreamMetadata(ctx(t), s, esdb.AppendToStreamOptions{}, meta)
	require.NoError(t, err)
	got, err := readStream(t, c, s, esdb.ReadStreamOptions{}, 100)
	require.NoError(t, err)
	assert.Equal(t, []uint64{7, 8, 9}, revisions(got), "$maxCount keeps the newest events")

	meta.SetMaxCount(5)
	_, err = c.SetStreamMetadata(ctx(t), s, esdb.AppendToStreamOptions{}, meta)
	require.NoError(t, err)
	read, err := c.GetStreamMetadata(ctx(t), s, esdb.ReadStreamOptions{})
	require.NoError(t, err)
	require.NotNil(t, read.MaxCount())
	assert.Equal(t, uint64(5), *read.MaxCount(), "the newest metadata is the one read")
	assert.Equal(t, "saga", read.CustomProperty("owner"))

	aged := stream("aged")
	_, err = c.AppendToStream(ctx(t), aged, esdb.AppendToStreamOptions{}, events(2, "E")...)
	require.NoError(t, err)
	var ageMeta esdb.StreamMetadata
	ageMeta.SetMaxAge(time.Second)
	_, err = c.SetStreamMetadata(ctx(t), aged, esdb.AppendToStreamOptions{}, ageMeta)
	require.NoError(t, err)
	// $maxAge is wall-clock by nature: wait until the events are older than
	// it, polling the observable result rather than sleeping a fixed time.
	require.Eventually(t, func() bool {
		got, err := readStream(t, c, aged, esdb.ReadStreamOptions{}, 100)
		return err == nil && len(got) == 0
	}, 10*time.Second, 100*time.Millisecond, "$maxAge hides old events")
}

func TestServerFeatures(t *testing.T) {
	embeddedOnly(t)
	tg := newTarget(t)
	_, err := tg.client.AppendToStream(ctx(t), stream("f"), esdb.AppendToStreamOptions{}, event("E", `{}`))
	require.NoError(t, err)
	err = tg.client.CreatePersistentSubscription(ctx(t), "s", "g", esdb.PersistentStreamSubscriptionOptions{})
	assert.NoError(t, err, "persistent subscriptions are offered")
	_, err = tg.client.ListPersistentSubscriptionsToAll(ctx(t), esdb.ListPersistentSubscriptionsOptions{})
	assert.NotEqual(t, esdb.ErrorCodeUnsupportedFeature, code(err), "groups on $all are announced")
}
