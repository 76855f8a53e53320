package broker

import (
	"container/list"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sagaengine/saga/domain"
)

// ErrTopicCap is returned by Broker.TopicCapacity when the embedded broker
// holds as many topics as it may and none of them can make room: topics a
// client would have created (an order's new reply topic) are refused until
// idle ones are deleted.
var ErrTopicCap = errors.New("the embedded kafka holds as many topics as its cap allows")

// fdsPerPartition is what a partition of the embedded broker costs in file
// descriptors for as long as it exists: kfake keeps its segment and index
// files open.
const fdsPerPartition = 2

// minTopicCap is the least DefaultMaxTopics gives, whatever the fd limit.
const minTopicCap = 64

// DefaultMaxTopics is the cap on the embedded broker's topics when
// Config.MaxTopics is 0: as many topics of partitions partitions as
// half of the process's file descriptors (limit, RLIMIT_NOFILE) can keep
// open, leaving the other half to connections, the event store and the
// task view; at least minTopicCap. A limit of 0 (unknown) gives 4096.
func DefaultMaxTopics(limit uint64, partitions int32) int {
	if limit == 0 {
		return 4096
	}
	if partitions <= 0 {
		partitions = 1
	}
	return max(minTopicCap, int(limit/2/uint64(fdsPerPartition*partitions)))
}

// ReplyTopic reports whether topic is a reply topic as the default reply
// pattern names them (reply.* and saga.reply.*): the topics the broker
// deletes once idle (Retention.IdleReplyTopicAfter).
func ReplyTopic(topic string) bool {
	return strings.HasPrefix(topic, "reply.") || strings.HasPrefix(topic, domain.ReplyTopicPrefix)
}

// topicCap bounds the topics clients make the embedded broker create.
//
// Two kinds of reply topic reach it. A caller that waits for its statuses
// creates its reply topic first (CreateTopics, as the Go client and sagactl
// do): that topic is the caller's, and stays until it deletes it or
// retention finds it idle. A reply topic that does not exist when saga's
// status publisher first writes to it is created by that write
// (auto-creation in a Metadata request): no caller had prepared it, and it
// is kept as a cache entry, of one partition. At the cap, a new topic takes
// the place of the oldest such auto-created reply topic that has existed
// for at least the grace (so that a task's statuses, seconds apart, do not
// each create its topic again), which is deleted; only when none is left is
// the request answered as if auto-creation were off, so the client hears
// UNKNOWN_TOPIC_OR_PARTITION, and the refusal is counted and logged. A
// flood of orders naming distinct reply topics therefore costs at most the
// cap in file descriptors and never shuts out a caller's own topic; while
// it lasts, the flood's own statuses are mostly refused (and
// dead-lettered), which costs far less than making topics. Saga's own
// topics (saga.*, but saga.reply.*) are never refused.
type topicCap struct {
	max    int
	logger *slog.Logger
	// grace is how long an auto-created reply topic is kept before it may
	// be deleted to make room.
	grace time.Duration
	now   func() time.Time

	mu sync.Mutex
	// names holds every topic the broker has.
	names map[string]known
	// evictable lists the reply topics created by auto-creation
	// (evictable values), oldest first.
	evictable *list.List
	// gone holds when the cap last forgot each topic since the last
	// reset: a listing made before then may still name it.
	gone                  map[string]time.Time
	lastLog, lastEvictLog time.Time

	refused, evicted atomic.Int64
}

// DefaultReplyTopicGrace is how long an auto-created reply topic is kept
// before it may be deleted to make room at the cap: longer than a task's
// statuses usually take.
const DefaultReplyTopicGrace = 10 * time.Second

func newTopicCap(limit int, grace time.Duration, logger *slog.Logger) *topicCap {
	if grace == 0 {
		grace = DefaultReplyTopicGrace
	}
	return &topicCap{max: limit, grace: max(grace, 0), logger: logger, now: time.Now, names: map[string]known{}, evictable: list.New(), gone: map[string]time.Time{}}
}

// known is a topic the cap counts: when it learnt of it, and its place in
// evictable, nil for a topic that is not evictable.
type known struct {
	since time.Time
	elem  *list.Element
}

// evictable is an auto-created reply topic and when it was created (zero:
// unknown, found at start).
type evictable struct {
	name    string
	created time.Time
}

// partitions is how many partitions the cap creates a topic with: one for
// a reply topic, which one caller reads, the broker's default for others.
func partitions(name string) int32 {
	if autoCreatedReply(name) {
		return 1
	}
	return -1
}

// autoCreatedReply reports whether a topic of this name that the broker
// creates by auto-creation may later be evicted to make room.
func autoCreatedReply(name string) bool {
	return ReplyTopic(name) && !domain.ReservedTopic(name)
}

// addLocked records a topic the broker now has; auto says auto-creation
// made it. An evictable topic is placed as the newest, or as the oldest
// when oldest is set (a topic found already there, of unknown age).
func (c *topicCap) addLocked(name string, auto, oldest bool) {
	if _, ok := c.names[name]; ok {
		return
	}
	now := c.now()
	switch {
	case !auto || !autoCreatedReply(name):
		c.names[name] = known{since: now}
	case oldest:
		c.names[name] = known{since: now, elem: c.evictable.PushFront(evictable{name: name})}
	default:
		c.names[name] = known{since: now, elem: c.evictable.PushBack(evictable{name: name, created: now})}
	}
}

func (c *topicCap) forgetLocked(name string) {
	if k := c.names[name]; k.elem != nil {
		c.evictable.Remove(k.elem)
	}
	delete(c.names, name)
	c.gone[name] = c.now()
}

// reset makes the known topics those the broker listed at listedAt, but
// for those the cap learnt of since: the listing may have been made while
// they were created. A reply topic listed that the cap did not know is of
// unknown origin: at start (atStart) it counts as auto-created and older
// than every other, so that a flood's topics from before a restart can
// make room; later it may be a caller's, and is never deleted to make room.
// A listed topic the cap deleted (or forgot) since listedAt is gone.
func (c *topicCap) reset(names []string, listedAt time.Time, atStart bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	listed := make(map[string]bool, len(names))
	for _, n := range names {
		listed[n] = true
		if at, ok := c.gone[n]; ok && !at.Before(listedAt) {
			continue
		}
		c.addLocked(n, atStart, true)
	}
	for n, at := range c.gone {
		if at.Before(listedAt) {
			delete(c.gone, n)
		}
	}
	for n, k := range c.names {
		if !listed[n] && k.since.Before(listedAt) {
			c.forgetLocked(n)
		}
	}
}

// forget drops a deleted topic.
func (c *topicCap) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(name)
}

// count is how many topics the broker holds, its cap, and how many of
// them could be evicted to make room.
func (c *topicCap) count() (topics, max, evictable int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.names), c.max, c.evictable.Len()
}

// unnamedVictimSearch bounds how many of the oldest evictable topics
// evictLocked looks through for one the request does not name.
const unnamedVictimSearch = 64

// evictLocked deletes the oldest evictable topic past its grace, preferring
// one the request being decided does not name (named), and reports whether
// it made room and whether the topic it deleted was named.
func (c *topicCap) evictLocked(named map[string]bool, remove func(string) error) (ok, wasNamed bool) {
	graceStart := c.now().Add(-c.grace)
	for c.evictable.Len() > 0 {
		victim := c.evictable.Front()
		if victim.Value.(evictable).created.After(graceStart) {
			return false, false // the oldest is still in its grace
		}
		looked := 0
		for e := victim; e != nil && looked < unnamedVictimSearch; e, looked = e.Next(), looked+1 {
			v := e.Value.(evictable)
			if v.created.After(graceStart) {
				break
			}
			if !named[v.name] {
				victim = e
				break
			}
		}
		name := victim.Value.(evictable).name
		err := remove(name)
		c.forgetLocked(name)
		if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			c.logger.Warn("kafka could not delete a reply topic to make room", "topic", name, "err", err.Error())
			continue
		}
		c.evicted.Add(1)
		if time.Since(c.lastEvictLog) >= time.Minute {
			c.lastEvictLog = time.Now()
			c.logger.Info("kafka deleted the oldest reply topics saga created for statuses to make room for new ones (--kafka-max-topics); a caller that creates its reply topic before it submits keeps it",
				"topics", len(c.names), "cap", c.max, "deleted", name, "deleted_total", c.evicted.Load())
		}
		return true, named[name]
	}
	return false, false
}

// admit decides a Metadata request: it creates the unknown topics it names
// while they fit under the cap, evicting the oldest auto-created reply
// topics to make room, and turns auto-creation off for the request, so
// that the broker creates nothing the cap did not count (a topic evicted
// and named again), a reply topic gets one partition, and a refused topic
// is answered as unknown without holding up another the request names;
// create and remove make and delete a topic. The cap knows
// every topic without asking the broker: it sees each creation, and a
// retention pass lists them (reset). Asking the broker about each unknown
// name a request carries cost a round trip through the broker's loop per
// name, and a status publisher's request names thousands in a flood.
func (c *topicCap) admit(req *kmsg.MetadataRequest, create, remove func(string) error) {
	if !req.AllowAutoTopicCreation || c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var fresh []string
	named := make(map[string]bool, len(req.Topics))
	for _, t := range req.Topics {
		if t.Topic == nil {
			continue
		}
		name := *t.Topic
		named[name] = true
		if _, ok := c.names[name]; ok {
			continue
		}
		fresh = append(fresh, name)
	}
	if len(fresh) == 0 {
		return
	}
	var refused, admitted []string
	for _, name := range fresh {
		if domain.ReservedTopic(name) || len(c.names)+len(admitted) < c.max {
			admitted = append(admitted, name)
			continue
		}
		if ok, _ := c.evictLocked(named, remove); ok {
			admitted = append(admitted, name)
			continue
		}
		refused = append(refused, name)
	}
	req.AllowAutoTopicCreation = false
	for _, name := range admitted {
		// A topic may exist that the cap does not know: a retention pass
		// lists the topics while one is created, and its reset drops it.
		err := create(name)
		if errors.Is(err, kerr.TopicAlreadyExists) {
			c.addLocked(name, false, false) // of unknown origin: perhaps a caller's
			continue
		}
		if err != nil {
			c.logger.Warn("kafka could not create a topic", "topic", name, "err", err.Error())
			continue
		}
		c.addLocked(name, true, false)
	}
	if len(refused) == 0 {
		return
	}
	c.refused.Add(int64(len(refused)))
	if time.Since(c.lastLog) >= time.Minute {
		c.lastLog = time.Now()
		c.logger.Warn("kafka refused to create topics: it holds as many as its cap (--kafka-max-topics) and none it may delete to make room; idle reply topics are deleted by retention",
			"topics", len(c.names), "cap", c.max, "refused", refused[0], "refused_total", c.refused.Load())
	}
}

// created decides a CreateTopics request: the topics a client creates
// itself are its own and are never evicted, but they make room by evicting
// auto-created reply topics when the broker is at its cap. Past the cap
// with nothing to evict they are still created, as before the cap: a
// client that may create topics is trusted with them (secure mode's
// authentication decides who may).
func (c *topicCap) created(req *kmsg.CreateTopicsRequest, remove func(string) error) {
	if c.max <= 0 || req.ValidateOnly {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	named := make(map[string]bool, len(req.Topics))
	for _, t := range req.Topics {
		named[t.Topic] = true
	}
	for _, t := range req.Topics {
		if k, ok := c.names[t.Topic]; ok {
			// A caller's own client may have named its reply topic
			// (consuming it, auto-creation on) before it creates it:
			// creating it claims it, and it is no longer deleted to
			// make room.
			if k.elem != nil {
				c.evictable.Remove(k.elem)
				k.elem = nil
				c.names[t.Topic] = k
			}
			continue
		}
		if !domain.ReservedTopic(t.Topic) && len(c.names) >= c.max {
			c.evictLocked(named, remove)
		}
		c.addLocked(t.Topic, false, false)
	}
}

// install makes cluster ask the cap before every Metadata request; the
// config guard asks it about CreateTopics requests (created).
func (c *topicCap) install(cluster *kfake.Cluster) {
	cluster.ControlKey(int16(kmsg.Metadata), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if req, ok := r.(*kmsg.MetadataRequest); ok {
			c.admit(req, func(topic string) error { return cluster.CreateTopic(topic, partitions(topic), nil) }, cluster.DeleteTopic)
		}
		return nil, nil, false
	})
}

// nameProducedTopicIDs works around kfake answering a Produce request (v13
// and later, which names topics by ID) that names two unknown topic IDs:
// it keys its answers by the request's topic names, empty for both, and
// panics, taking the process with it. A client that still holds the ID of
// a deleted topic (an idle reply topic, deleted by retention) sends such
// requests, so every topic named by ID gets a distinct placeholder name;
// kfake replaces it with the topic's real name, or keeps it to answer
// UNKNOWN_TOPIC_ID, and a v13 answer carries IDs, not names.
func nameProducedTopicIDs(cluster *kfake.Cluster) {
	cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if req, ok := r.(*kmsg.ProduceRequest); ok && req.Version >= 13 {
			for i := range req.Topics {
				if req.Topics[i].Topic == "" {
					req.Topics[i].Topic = "\x00topic-id-" + strconv.Itoa(i)
				}
			}
		}
		return nil, nil, false
	})
}

// TopicCapacity reports how many topics the broker holds and its cap (0:
// none), and ErrTopicCap when it is full and holds no auto-created reply
// topic it could delete to make room, with how many creations it has
// refused.
func (b *Broker) TopicCapacity() (topics, max int, err error) {
	if b.topics == nil {
		return 0, 0, nil
	}
	topics, max, evictable := b.topics.count()
	if max > 0 && topics >= max && evictable == 0 {
		return topics, max, errors.Wrapf(ErrTopicCap, "%d topics, cap %d; %d creations refused", topics, max, b.topics.refused.Load())
	}
	return topics, max, nil
}

// EvictedTopics counts the auto-created reply topics deleted to make room
// for new topics at the cap.
func (b *Broker) EvictedTopics() int64 {
	if b.topics == nil {
		return 0
	}
	return b.topics.evicted.Load()
}

// RefusedTopics counts the topic creations the cap refused.
func (b *Broker) RefusedTopics() int64 {
	if b.topics == nil {
		return 0
	}
	return b.topics.refused.Load()
}

// listTopicNames lists the broker's topics, but internal ones, as they are
// once it is called, for the cap's reset: kadm's ListTopics answers from the
// client's metadata cache when the client listed them in the last
// MetadataMinAge (5 s), as a retention pass's client has, and a topic
// created since would be missing from a listing the cap takes as newer.
func listTopicNames(ctx context.Context, client *kgo.Client) ([]string, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, client)
	if err != nil {
		return nil, errors.Wrap(err, "list topics")
	}
	names := make([]string, 0, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic != nil && !t.IsInternal {
			names = append(names, *t.Topic)
		}
	}
	return names, nil
}

// neverWrittenGrace multiplies the idle time after which a reply topic that
// never held a record is deleted.
const neverWrittenGrace = 10

// idleTopics remembers, across retention passes, since when each reply
// topic's log end has not moved.
type idleTopics struct {
	ends  map[string]int64
	since map[string]time.Time
}

// deleteIdleReplyTopics deletes the reply topics (ReplyTopic) whose log end
// has not moved for idleAfter and that no consumer group has records left
// to read on: a reply topic costs file descriptors for as long as it
// exists, and an order's statuses are long delivered. A client that names
// it again gets it created again.
func (b *Broker) deleteIdleReplyTopics(ctx context.Context, client *kgo.Client, idle *idleTopics, idleAfter time.Duration, now time.Time) (int, error) {
	adm := kadm.NewClient(client)
	listedAt := time.Now()
	listed, err := listTopicNames(ctx, client)
	if err != nil {
		return 0, err
	}
	if b.topics != nil {
		b.topics.reset(listed, listedAt, false)
	}
	var replies []string
	for _, name := range listed {
		if ReplyTopic(name) {
			replies = append(replies, name)
		}
	}
	if len(replies) == 0 {
		return 0, nil
	}
	ends, err := adm.ListEndOffsets(ctx, replies...)
	if err != nil {
		return 0, errors.Wrap(err, "list end offsets")
	}
	total := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			total[o.Topic] += o.Offset
		}
	})
	pending := map[string]bool{}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return 0, errors.Wrap(err, "list groups")
	}
	if names := groups.Groups(); len(names) > 0 {
		lags, err := adm.Lag(ctx, names...)
		if err != nil {
			return 0, errors.Wrap(err, "read consumer lag")
		}
		lags.Each(func(l kadm.DescribedGroupLag) {
			for topic, parts := range l.Lag {
				for _, p := range parts {
					if p.Lag > 0 {
						pending[topic] = true
					}
				}
			}
		})
	}
	var deletable []string
	seen := map[string]bool{}
	for _, name := range replies {
		seen[name] = true
		end := total[name]
		if last, ok := idle.ends[name]; !ok || last != end || pending[name] {
			idle.ends[name], idle.since[name] = end, now
			continue
		}
		wait := idleAfter
		if end == 0 {
			// Never written yet: a producer's metadata request creates a
			// topic before its first record lands, which on a busy
			// machine can be seconds later; deleting it in between
			// would fail those records. So an empty topic waits longer.
			wait = neverWrittenGrace * idleAfter
		}
		if now.Sub(idle.since[name]) >= wait {
			deletable = append(deletable, name)
		}
	}
	for name := range idle.ends {
		if !seen[name] {
			delete(idle.ends, name)
			delete(idle.since, name)
		}
	}
	deleted := 0
	for _, name := range deletable {
		if err := b.cluster.DeleteTopic(name); err != nil {
			b.logger.Warn("kafka could not delete an idle reply topic", "topic", name, "err", err.Error())
			continue
		}
		deleted++
		delete(idle.ends, name)
		delete(idle.since, name)
		if b.topics != nil {
			b.topics.forget(name)
		}
	}
	if deleted > 0 {
		b.logger.Info("kafka deleted idle reply topics", "deleted", deleted, "idle_after", idleAfter)
	}
	return deleted, nil
}
