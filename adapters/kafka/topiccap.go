package kafka

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sagaengine/saga/domain"
)

// ErrTopicCap is returned by Broker.TopicCapacity when the embedded broker
// holds as many topics as it may: topics a client would have created
// (an order's new reply topic) are refused until idle ones are deleted.
var ErrTopicCap = errors.New("the embedded kafka holds as many topics as its cap allows")

// fdsPerPartition is what a partition of the embedded broker costs in file
// descriptors for as long as it exists: kfake keeps its segment and index
// files open.
const fdsPerPartition = 2

// minTopicCap is the least DefaultMaxTopics gives, whatever the fd limit.
const minTopicCap = 64

// DefaultMaxTopics is the cap on the embedded broker's topics when
// BrokerConfig.MaxTopics is 0: as many topics of partitions partitions as
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

// topicCap bounds the topics clients make the embedded broker create by
// naming them (auto-creation in Metadata requests): past max, the request is
// answered as if auto-creation were off, so the client hears
// UNKNOWN_TOPIC_OR_PARTITION, and the refusal is counted and logged. Saga's
// own topics (saga.*, but saga.reply.*) are never refused.
type topicCap struct {
	max    int
	logger *slog.Logger

	mu      sync.Mutex
	names   map[string]struct{}
	lastLog time.Time

	refused atomic.Int64
}

func newTopicCap(max int, logger *slog.Logger) *topicCap {
	return &topicCap{max: max, logger: logger, names: map[string]struct{}{}}
}

// reset replaces the known topics with those the broker lists.
func (c *topicCap) reset(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = make(map[string]struct{}, len(names))
	for _, n := range names {
		c.names[n] = struct{}{}
	}
}

// forget drops a deleted topic.
func (c *topicCap) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.names, name)
}

// count is how many topics the broker holds, and its cap.
func (c *topicCap) count() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.names), c.max
}

// admit decides a Metadata request: it lets the broker auto-create the
// unknown topics it names while they fit under the cap. When one does not,
// it turns auto-creation off for the request and creates the others itself
// (create), so that one refused topic does not hold up another a client
// names in the same request. exists says whether the broker has a topic
// (one created meanwhile by CreateTopics).
func (c *topicCap) admit(req *kmsg.MetadataRequest, exists func(string) bool, create func(string) error) {
	if !req.AllowAutoTopicCreation || c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var fresh []string
	for _, t := range req.Topics {
		if t.Topic == nil {
			continue
		}
		name := *t.Topic
		if _, ok := c.names[name]; ok {
			continue
		}
		if exists(name) {
			c.names[name] = struct{}{}
			continue
		}
		fresh = append(fresh, name)
	}
	room := c.max - len(c.names)
	var refused, admitted []string
	for _, name := range fresh {
		if domain.ReservedTopic(name) || room > 0 {
			room--
			admitted = append(admitted, name)
			continue
		}
		refused = append(refused, name)
	}
	if len(refused) > 0 {
		req.AllowAutoTopicCreation = false
		for _, name := range admitted {
			if err := create(name); err != nil {
				c.logger.Warn("kafka could not create a topic", "topic", name, "err", err.Error())
				continue
			}
			c.names[name] = struct{}{}
		}
		c.refused.Add(int64(len(refused)))
		if time.Since(c.lastLog) >= time.Minute {
			c.lastLog = time.Now()
			c.logger.Warn("kafka refused to create topics: it holds as many as its cap (--kafka-max-topics); idle reply topics are deleted by retention",
				"topics", len(c.names), "cap", c.max, "refused", refused[0], "refused_total", c.refused.Load())
		}
		return
	}
	for _, name := range fresh {
		c.names[name] = struct{}{}
	}
}

// install makes cluster ask the cap before every Metadata request.
func (c *topicCap) install(cluster *kfake.Cluster) {
	cluster.ControlKey(int16(kmsg.Metadata), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if req, ok := r.(*kmsg.MetadataRequest); ok {
			c.admit(req, func(topic string) bool { return cluster.TopicInfo(topic) != nil },
				func(topic string) error { return cluster.CreateTopic(topic, -1, nil) })
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
// none), and ErrTopicCap when it is full, with how many creations it has
// refused.
func (b *Broker) TopicCapacity() (topics, max int, err error) {
	if b.topics == nil {
		return 0, 0, nil
	}
	topics, max = b.topics.count()
	if max > 0 && topics >= max {
		return topics, max, errors.Wrapf(ErrTopicCap, "%d topics, cap %d; %d creations refused", topics, max, b.topics.refused.Load())
	}
	return topics, max, nil
}

// RefusedTopics counts the topic creations the cap refused.
func (b *Broker) RefusedTopics() int64 {
	if b.topics == nil {
		return 0
	}
	return b.topics.refused.Load()
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
func (b *Broker) deleteIdleReplyTopics(ctx context.Context, adm *kadm.Client, idle *idleTopics, idleAfter time.Duration, now time.Time) (int, error) {
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		return 0, errors.Wrap(err, "list topics")
	}
	if b.topics != nil {
		b.topics.reset(listed.Names())
	}
	var replies []string
	for _, name := range listed.Names() {
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
