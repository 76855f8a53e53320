package broker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestAnEmptyReplyTopicWaitsLongerBeforeItIsDeleted: a reply topic that
// never held a record (a producer's metadata request created it, its first
// record not landed yet) is not deleted after the ordinary idle time, which
// would fail that record, but only after neverWrittenGrace times it; a
// written one goes after the idle time. Time is given to the pass, not
// waited for.
func TestAnEmptyReplyTopicWaitsLongerBeforeItIsDeleted(t *testing.T) {
	b, err := Start(Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 1, Retention: &Retention{},
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	t.Cleanup(client.Close)
	adm := kadm.NewClient(client)
	_, err = adm.CreateTopic(ctx, 1, 1, nil, "reply.empty")
	require.NoError(t, err)
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: "reply.written", Value: []byte("status")}).FirstErr())

	idle := &idleTopics{ends: map[string]int64{}, since: map[string]time.Time{}}
	const after = time.Minute
	t0 := time.Now()
	exists := func() (empty, written bool) {
		// A fresh client: one answers a listing from its metadata cache
		// for a while.
		fresh, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
		require.NoError(t, err)
		defer fresh.Close()
		listed, err := kadm.NewClient(fresh).ListTopics(ctx)
		require.NoError(t, err)
		return listed.Has("reply.empty"), listed.Has("reply.written")
	}
	for _, at := range []time.Duration{0, after} {
		_, err = b.deleteIdleReplyTopics(ctx, client, idle, after, t0.Add(at))
		require.NoError(t, err)
	}
	empty, written := exists()
	assert.False(t, written, "a written reply topic idle for the idle time is deleted")
	assert.True(t, empty, "an empty one waits longer")

	_, err = b.deleteIdleReplyTopics(ctx, client, idle, after, t0.Add(neverWrittenGrace*after))
	require.NoError(t, err)
	empty, _ = exists()
	assert.False(t, empty, "an empty reply topic is deleted once the longer wait is over")
}

// TestTheCapKeepsYoungReplyTopicsAndCreatesWhatItAdmits: the cap creates
// every topic it admits itself (a reply topic with one partition) and turns
// the broker's auto-creation off, so that nothing it did not count is
// created, not even a topic it deleted that the request names again; an
// auto-created reply topic within its grace is not deleted to make room,
// and a topic a caller created never is.
func TestTheCapKeepsYoungReplyTopicsAndCreatesWhatItAdmits(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := newTopicCap(3, 10*time.Second, slog.New(slog.DiscardHandler))
	c.now = func() time.Time { return now }
	c.reset([]string{"saga.status"}, now, true)
	var created, removed []string
	create := func(name string) error { created = append(created, name); return nil }
	remove := func(name string) error { removed = append(removed, name); return nil }
	metadata := func(names ...string) *kmsg.MetadataRequest {
		req := kmsg.NewPtrMetadataRequest()
		req.AllowAutoTopicCreation = true
		for _, n := range names {
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(n)
			req.Topics = append(req.Topics, rt)
		}
		return req
	}
	c.created(&kmsg.CreateTopicsRequest{Topics: []kmsg.CreateTopicsRequestTopic{{Topic: "reply.mine"}}}, remove)

	req := metadata("reply.a")
	c.admit(req, create, remove)
	assert.Equal(t, []string{"reply.a"}, created, "the cap creates what it admits")
	assert.False(t, req.AllowAutoTopicCreation, "and the broker creates nothing itself")

	now = now.Add(time.Second)
	c.admit(metadata("reply.a", "reply.b"), create, remove)
	assert.Empty(t, removed, "reply.a is within its grace")
	assert.Equal(t, []string{"reply.a"}, created, "reply.b is refused")
	assert.EqualValues(t, 1, c.refused.Load())

	now = now.Add(10 * time.Second)
	req = metadata("reply.a", "reply.b")
	c.admit(req, create, remove)
	assert.Equal(t, []string{"reply.a"}, removed, "past its grace, reply.a makes room, named or not")
	assert.Equal(t, []string{"reply.a", "reply.b"}, created)
	assert.False(t, req.AllowAutoTopicCreation, "reply.a, deleted and named, is not created again behind the cap")

	now = now.Add(time.Minute)
	c.admit(metadata("reply.c"), create, remove)
	assert.Equal(t, []string{"reply.a", "reply.b"}, removed, "reply.mine is its caller's: reply.b made room")
	topics, _, evictable := c.count()
	assert.Equal(t, 3, topics)
	assert.Equal(t, 1, evictable, "reply.c")

	assert.EqualValues(t, 1, partitions("reply.c"))
	assert.EqualValues(t, 1, partitions("saga.reply.c"))
	assert.EqualValues(t, -1, partitions("orders"))
}

// TestAListingDoesNotLoseATopicCreatedWhileItWasMade: a retention pass
// lists the topics, and a caller creates its reply topic before the pass
// hands the listing to the cap. The cap keeps counting the caller's topic
// as the caller's: when it forgot it, the next status recreated it as an
// auto-created reply topic, which a flood later deleted under the caller.
// A reply topic listed that the cap did not know is, after start, never
// deleted to make room.
func TestAListingDoesNotLoseATopicCreatedWhileItWasMade(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := newTopicCap(3, -1, slog.New(slog.DiscardHandler))
	c.now = func() time.Time { return now }
	c.reset([]string{"saga.status"}, now, true)
	listedAt := now
	now = now.Add(time.Millisecond)
	c.created(&kmsg.CreateTopicsRequest{Topics: []kmsg.CreateTopicsRequestTopic{{Topic: "saga.reply.caller"}}}, nil)
	c.reset([]string{"saga.status", "reply.unknown"}, listedAt, false) // listed before the caller's topic existed
	topics, _, evictable := c.count()
	assert.Equal(t, 3, topics, "the caller's topic is still counted")
	assert.Zero(t, evictable, "neither the caller's topic nor one of unknown origin may be deleted to make room")

	var removed []string
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = true
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("reply.new")
	req.Topics = append(req.Topics, rt)
	c.admit(req, func(string) error { return nil }, func(name string) error { removed = append(removed, name); return nil })
	assert.Empty(t, removed)
	assert.EqualValues(t, 1, c.refused.Load(), "full of topics it may not delete: refused")
}

// TestCreatingATopicClaimsItFromTheCache: a caller whose client consumes
// its reply topic with auto-creation on names the topic in a Metadata
// request before it creates it, so the cap first counts it as
// auto-created; the CreateTopics that follows claims it, and it is never
// deleted to make room. In the 100,000-order flood the waiting caller's
// topic was deleted so, and its statuses were dead-lettered.
func TestCreatingATopicClaimsItFromTheCache(t *testing.T) {
	c := newTopicCap(3, -1, slog.New(slog.DiscardHandler))
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = true
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr("saga.reply.caller")
	req.Topics = append(req.Topics, rt)
	c.admit(req, func(string) error { return nil }, func(string) error { return nil })
	_, _, evictable := c.count()
	require.Equal(t, 1, evictable, "named first, it counts as auto-created")

	c.created(&kmsg.CreateTopicsRequest{Topics: []kmsg.CreateTopicsRequestTopic{{Topic: "saga.reply.caller"}}}, nil)
	topics, _, evictable := c.count()
	assert.Equal(t, 1, topics)
	assert.Zero(t, evictable, "created by its caller, it is the caller's")
}

// TestARetentionPassKeepsTheTopicsCreatedSinceItsClientLastListed: a
// retention pass lists the topics twice with one client (its config pass,
// then its idle reply topic pass), and a client answers a listing from its
// metadata cache for a while. A reply topic auto-created between the two
// listings was missing from the second while the cap took it as made after
// it, so the cap forgot it; named again, it was found existing and counted
// as a caller's. Under load every topic of a flood went that way, and the
// cap, full of topics it may not delete, refused every new reply topic.
func TestARetentionPassKeepsTheTopicsCreatedSinceItsClientLastListed(t *testing.T) {
	b, err := Start(Config{Listen: "127.0.0.1:0", Partitions: 1, MaxTopics: 8,
		Retention: &Retention{IdleReplyTopicAfter: time.Hour}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pass, err := b.internalClient()
	require.NoError(t, err)
	t.Cleanup(pass.Close)
	_, err = kadm.NewClient(pass).ListTopics(ctx) // the pass's first listing
	require.NoError(t, err)

	producer, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	require.NoError(t, producer.ProduceSync(ctx, &kgo.Record{Topic: "reply.flood-1", Value: []byte("status")}).FirstErr())
	_, _, evictable := b.topics.count()
	require.Equal(t, 1, evictable, "the cap auto-created reply.flood-1")

	idle := &idleTopics{ends: map[string]int64{}, since: map[string]time.Time{}}
	_, err = b.deleteIdleReplyTopics(ctx, pass, idle, time.Hour, time.Now())
	require.NoError(t, err)
	_, _, evictable = b.topics.count()
	assert.Equal(t, 1, evictable, "the cap still counts reply.flood-1 as auto-created")
}

// TestAListingDoesNotBringBackATopicDeletedWhileItWasMade: a retention
// pass lists the topics, and the cap deletes one of them to make room
// before the pass hands the listing to the cap. The listed topic is gone:
// counting it again, as one of unknown origin that may never make room,
// put the cap over its limit and, with every eviction in a flood, filled it
// with topics that do not exist until the next pass.
func TestAListingDoesNotBringBackATopicDeletedWhileItWasMade(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := newTopicCap(2, 10*time.Second, slog.New(slog.DiscardHandler))
	c.now = func() time.Time { return now }
	c.reset([]string{"saga.status"}, now, true)
	metadata := func(name string) *kmsg.MetadataRequest {
		req := kmsg.NewPtrMetadataRequest()
		req.AllowAutoTopicCreation = true
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
		return req
	}
	var removed []string
	create := func(string) error { return nil }
	remove := func(name string) error { removed = append(removed, name); return nil }
	c.admit(metadata("reply.a"), create, remove)

	now = now.Add(time.Minute)
	listedAt := now
	now = now.Add(time.Millisecond)
	c.admit(metadata("reply.b"), create, remove)
	require.Equal(t, []string{"reply.a"}, removed, "reply.a made room for reply.b")
	c.reset([]string{"saga.status", "reply.a"}, listedAt, false) // listed before reply.a was deleted
	topics, _, evictable := c.count()
	assert.Equal(t, 2, topics, "saga.status and reply.b")
	assert.Equal(t, 1, evictable, "reply.b")

	now = now.Add(time.Minute)
	c.reset([]string{"saga.status", "reply.b"}, now, false)
	c.reset([]string{"saga.status", "reply.b", "reply.a"}, now.Add(time.Millisecond), false) // a caller made reply.a since
	topics, _, _ = c.count()
	assert.Equal(t, 3, topics, "a topic listed after it was deleted is counted again")
}
