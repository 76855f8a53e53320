package broker

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sagaengine/saga/domain/protocol"
)

// Retention is how much of each partition the embedded broker keeps.
//
// Why the broker needs it: kfake keeps an index entry in memory for every
// record batch of every partition, and loads them all at start, so without
// retention its memory and start-up grow with history (about 0.9 GiB at a
// million tasks, mostly statuses). saga's own records are notifications and
// internal messages whose truth is in the event store, so they need not be
// kept forever.
//
// How it keeps the durability contract: a pass never removes a record that a
// consumer group with a committed offset on its partition has not yet
// committed past. An acknowledged order that the submitter has not read yet
// stays however old it is and however many follow it; it goes only once the
// submitter has committed past it (after recording its task in the event
// store). Consumers without a group (kcat without -G, the Go client's private
// reply topic, sagactl's dead-letter reader) are not protected, as with
// Kafka's own retention. A group's offsets hold records back until the
// group is deleted or kfake expires the offsets of a group that has stayed
// empty for offsets.retention.minutes (seven days).
type Retention struct {
	// MaxAge removes records older than this (by their timestamp). Zero
	// keeps records of any age.
	MaxAge time.Duration
	// MaxRecords keeps at most this many records per partition. Zero sets
	// no limit on the count.
	MaxRecords int64
	// RederivedMaxRecords, when above zero, is MaxRecords for the topics
	// saga re-derives from the event store (commands, replies, agent
	// heartbeats): written without fsync and kept only for inspection, so
	// they need not cost the broker as much memory as orders and statuses.
	// The 10 minutes of a 256-in-flight run through Kafka held ~45 MB of
	// kfake's index for them at 50,000 records a partition.
	RederivedMaxRecords int64
	// Interval is the time between two passes. Zero means
	// DefaultRetentionInterval.
	Interval time.Duration
	// IdleReplyTopicAfter deletes a reply topic (reply.*, saga.reply.*)
	// whose log end has not moved for this long and on which no consumer
	// group has records left to read: each topic holds file descriptors
	// for as long as it exists. Zero keeps them.
	IdleReplyTopicAfter time.Duration
}

// DefaultIdleReplyTopicAfter is how long a reply topic may stay idle before
// the embedded broker deletes it: a day, long after an order's last status.
const DefaultIdleReplyTopicAfter = 24 * time.Hour

// DefaultRetentionInterval is the time between two retention passes.
const DefaultRetentionInterval = time.Minute

// DefaultRetention is what the embedded broker keeps unless told otherwise:
// Kafka's default age of seven days, and at most 50,000 records per
// partition (at saga's ~8 statuses per task, the statuses of the last
// 25,000 tasks on a 4-partition status topic), 10,000 records per
// partition of the topics saga re-derives, and idle reply topics for a day.
var DefaultRetention = Retention{MaxAge: 7 * 24 * time.Hour, MaxRecords: 50_000, RederivedMaxRecords: 10_000,
	Interval: DefaultRetentionInterval, IdleReplyTopicAfter: DefaultIdleReplyTopicAfter}

// rederived reports whether saga re-derives topic's records from the event
// store: commands, replies and agent heartbeats.
func rederived(topic string) bool {
	return strings.HasPrefix(topic, protocol.CommandTopicPrefix) || topic == protocol.RepliesTopic || topic == protocol.AgentsTopic
}

// maxRecords is the count of records r keeps per partition of topic.
func (r Retention) maxRecords(topic string) int64 {
	if r.RederivedMaxRecords > 0 && rederived(topic) {
		return r.RederivedMaxRecords
	}
	return r.MaxRecords
}

// interval is the time between two passes.
func (r Retention) interval() time.Duration {
	if r.Interval <= 0 {
		return DefaultRetentionInterval
	}
	return r.Interval
}

// Enabled reports whether the broker-wide retention removes anything at
// all. A topic's own retention.ms and retention.bytes apply either way.
func (r Retention) Enabled() bool {
	return r.MaxAge > 0 || r.MaxRecords > 0 || r.RederivedMaxRecords > 0 || r.IdleReplyTopicAfter > 0
}

// retentionSegmentBytes is the segment size of the embedded broker. kfake
// frees a trimmed batch's index entry at once but deletes a segment file only
// when all of it is trimmed, and a restart after a crash (no clean-shutdown
// snapshot of the log start) loads every batch of the files that remain; so
// segments are kept much smaller than Kafka's 1 GiB (kfake's default is
// 100 MiB) to bound both the disk and the memory that trimmed data holds.
const retentionSegmentBytes = 16 << 20

// partitionCut is what a retention pass knows of one partition.
type partitionCut struct {
	start, end int64
	// afterAge is the first offset not older than the topic's age limit
	// (its retention.ms, else MaxAge; end if none); -1 if it has none.
	afterAge int64
	// afterBytes is the first offset of the newest records that fit in
	// the topic's retention.bytes; -1 if it has none.
	afterBytes int64
	// committed is the lowest offset committed on the partition by any
	// group; -1 if no group has committed on it.
	committed int64
}

// newStart is the log start offset the retention asks for: the latest of
// what the count, the age and the size allow, but never past a group's
// committed offset.
func (p partitionCut) newStart(r Retention, topic string) int64 {
	to := p.start
	if n := r.maxRecords(topic); n > 0 && p.end-n > to {
		to = p.end - n
	}
	to = max(to, p.afterAge, p.afterBytes)
	to = min(to, p.end)
	if p.committed >= 0 && p.committed < to {
		to = p.committed
	}
	return to
}

// topicRetention is a topic's own retention.ms and retention.bytes, as
// DescribeConfigs reports them; nil where it has none.
type topicRetention struct {
	ms, bytes *int64
}

// deletableTopics are the topics a pass may cut, with their own retention
// settings: not kfake's internal ones, and not compacted ones, whose newest
// record per key is their content (a count or an age would remove live
// keys; a compacted topic keeps its own size in check).
func deletableTopics(ctx context.Context, adm *kadm.Client, names []string) ([]string, map[string]topicRetention, error) {
	var topics []string
	for _, name := range names {
		if !strings.HasPrefix(name, "__") {
			topics = append(topics, name)
		}
	}
	if len(topics) == 0 {
		return nil, nil, nil
	}
	configs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, nil, errors.Wrap(err, "describe topic configs")
	}
	compacted := map[string]bool{}
	own := map[string]topicRetention{}
	for _, rc := range configs {
		if rc.Err != nil {
			continue // deleted since listed
		}
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil && strings.Contains(*c.Value, "compact") {
				compacted[rc.Name] = true
			}
			if c.Source != kmsg.ConfigSourceDynamicTopicConfig || c.Value == nil {
				continue
			}
			n, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				continue // the broker refuses such values; one stored before it did is ignored
			}
			t := own[rc.Name]
			switch c.Key {
			case "retention.ms":
				t.ms = &n
			case "retention.bytes":
				t.bytes = &n
			}
			own[rc.Name] = t
		}
	}
	kept := topics[:0]
	for _, name := range topics {
		if !compacted[name] {
			kept = append(kept, name)
		}
	}
	return kept, own, nil
}

// maxAge is the age limit of topic: its own retention.ms (-1: none), else
// r.MaxAge; ok is false for none.
func (t topicRetention) maxAge(r Retention) (time.Duration, bool) {
	if t.ms != nil {
		return time.Duration(*t.ms) * time.Millisecond, *t.ms >= 0
	}
	return r.MaxAge, r.MaxAge > 0
}

// keepBytes is the first offset of the newest records that fit in limit
// bytes, estimated from the partition's mean record size (kfake counts
// bytes by batch, not by record); -1 if the partition fits.
func keepBytes(start, end, size, limit int64) int64 {
	records := end - start
	if limit < 0 || size <= limit || records <= 0 {
		return -1
	}
	keep := int64(float64(limit) / (float64(size) / float64(records)))
	return end - min(keep, records)
}

// partitionBytes reports the bytes each partition of a topic holds.
type partitionBytes func(topic string) map[int32]int64

// applyRetention runs one retention pass over every topic but kfake's
// internal and compacted ones, and reports the number of records removed:
// r's caps and each topic's own retention.ms and retention.bytes (sizes
// reports the partitions' bytes), never past a group's committed offset.
func applyRetention(ctx context.Context, adm *kadm.Client, r Retention, now time.Time, sizes partitionBytes, logger *slog.Logger) (int64, error) {
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		return 0, errors.Wrap(err, "list topics")
	}
	topics, own, err := deletableTopics(ctx, adm, listed.Names())
	if err != nil || len(topics) == 0 || !r.Enabled() && len(own) == 0 {
		return 0, err
	}
	cuts := map[string]map[int32]*partitionCut{}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return 0, errors.Wrap(err, "list start offsets")
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return 0, errors.Wrap(err, "list end offsets")
	}
	starts.Each(func(o kadm.ListedOffset) {
		end, ok := ends.Lookup(o.Topic, o.Partition)
		if o.Err != nil || !ok || end.Err != nil {
			return
		}
		if cuts[o.Topic] == nil {
			cuts[o.Topic] = map[int32]*partitionCut{}
		}
		cuts[o.Topic][o.Partition] = &partitionCut{start: o.Offset, end: end.Offset, afterAge: -1, afterBytes: -1, committed: -1}
	})
	byAge := map[time.Duration][]string{}
	for _, topic := range topics {
		if age, ok := own[topic].maxAge(r); ok {
			byAge[age] = append(byAge[age], topic)
		}
	}
	for age, aged := range byAge {
		after, err := adm.ListOffsetsAfterMilli(ctx, now.Add(-age).UnixMilli(), aged...)
		if err != nil {
			return 0, errors.Wrap(err, "list offsets by age")
		}
		after.Each(func(o kadm.ListedOffset) {
			if c := cuts[o.Topic][o.Partition]; c != nil && o.Err == nil {
				c.afterAge = o.Offset
				if o.Offset < 0 { // no record that new: all are older
					c.afterAge = c.end
				}
			}
		})
	}
	for topic, t := range own {
		if t.bytes == nil || *t.bytes < 0 || cuts[topic] == nil || sizes == nil {
			continue
		}
		for partition, size := range sizes(topic) {
			if c := cuts[topic][partition]; c != nil {
				c.afterBytes = keepBytes(c.start, c.end, size, *t.bytes)
			}
		}
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return 0, errors.Wrap(err, "list groups")
	}
	if names := groups.Groups(); len(names) > 0 {
		committed := adm.FetchManyOffsets(ctx, names...)
		// A group whose offsets cannot be read could be holding any
		// record back: remove nothing in this pass.
		if err := committed.Error(); err != nil {
			return 0, errors.Wrap(err, "fetch committed offsets")
		}
		for _, group := range committed {
			group.Fetched.Each(func(o kadm.OffsetResponse) {
				c := cuts[o.Topic][o.Partition]
				if c == nil || o.Err != nil || o.At < 0 {
					return
				}
				if c.committed < 0 || o.At < c.committed {
					c.committed = o.At
				}
			})
		}
	}
	remove := kadm.Offsets{}
	var removed int64
	for topic, partitions := range cuts {
		for partition, c := range partitions {
			to := c.newStart(r, topic)
			if to <= c.start {
				continue
			}
			remove.Add(kadm.Offset{Topic: topic, Partition: partition, At: to})
			removed += to - c.start
		}
	}
	if len(remove) == 0 {
		return 0, nil
	}
	resp, err := adm.DeleteRecords(ctx, remove)
	if err != nil {
		return 0, errors.Wrap(err, "delete records")
	}
	resp.Each(func(d kadm.DeleteRecordsResponse) {
		if d.Err != nil {
			err = errors.CombineErrors(err, errors.Wrapf(d.Err, "delete records of %s/%d", d.Topic, d.Partition))
		}
	})
	if err != nil {
		return 0, err
	}
	logger.Debug("kafka retention", "records", removed, "partitions", len(remove))
	return removed, nil
}
