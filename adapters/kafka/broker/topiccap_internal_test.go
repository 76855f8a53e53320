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
		_, err = b.deleteIdleReplyTopics(ctx, adm, idle, after, t0.Add(at))
		require.NoError(t, err)
	}
	empty, written := exists()
	assert.False(t, written, "a written reply topic idle for the idle time is deleted")
	assert.True(t, empty, "an empty one waits longer")

	_, err = b.deleteIdleReplyTopics(ctx, adm, idle, after, t0.Add(neverWrittenGrace*after))
	require.NoError(t, err)
	empty, _ = exists()
	assert.False(t, empty, "an empty reply topic is deleted once the longer wait is over")
}

// TestEvictingATopicTheRequestNamesStopsItsAutoCreation: when the only
// topic that can make room is one the Metadata request itself names, it is
// deleted, and the broker must not create it again by auto-creation behind
// the cap's back, so the cap creates the new topic itself and turns
// auto-creation off for the request. Topics a caller created are never
// deleted.
func TestEvictingATopicTheRequestNamesStopsItsAutoCreation(t *testing.T) {
	c := newTopicCap(3, slog.New(slog.DiscardHandler))
	c.reset([]string{"saga.status"})
	var created, removed []string
	create := func(name string) error { created = append(created, name); return nil }
	remove := func(name string) error { removed = append(removed, name); return nil }
	topics := func(names ...string) *kmsg.MetadataRequest {
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
	req := topics("reply.a")
	c.admit(req, create, remove)
	assert.True(t, req.AllowAutoTopicCreation, "room left: the broker creates it")

	req = topics("reply.a", "reply.b")
	c.admit(req, create, remove)
	assert.Equal(t, []string{"reply.a"}, removed, "reply.a is the only auto-created topic")
	assert.False(t, req.AllowAutoTopicCreation, "reply.a is named: auto-creation would bring it back")
	assert.Equal(t, []string{"reply.b"}, created)

	req = topics("reply.c")
	c.admit(req, create, remove)
	assert.Equal(t, []string{"reply.a", "reply.b"}, removed)
	assert.True(t, req.AllowAutoTopicCreation, "reply.b was not named: the broker creates reply.c")
	topicsHeld, _, evictable := c.count()
	assert.Equal(t, 3, topicsHeld)
	assert.Equal(t, 1, evictable, "reply.c; reply.mine is its caller's")
}
