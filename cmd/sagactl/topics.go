package main

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
)

// openKafka connects to the brokers with the security flags and makes sure
// they answer within a few seconds, so that a command never waits
// silently on a broker that is not there.
func openKafka(ctx context.Context, c *common, opts ...kgo.Opt) (*kgo.Client, error) {
	kafkaOpts, err := c.kafkaOpts()
	if err != nil {
		return nil, err
	}
	client, err := kafka.NewClient(kafka.SplitBrokers(c.brokers), append(kafkaOpts, opts...)...)
	if err != nil {
		return nil, err
	}
	probe, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Ping(probe); err != nil {
		client.Close()
		return nil, errors.Wrapf(c.security.Explain(err), "no answer from Kafka at %s within 5s; is sagad running", c.brokers)
	}
	return client, nil
}

// readTopic hands fn every record of topic from its oldest (or the first
// written at or after since) up to its end when it is called, partition by
// partition in order, and returns. It reads without a consumer group:
// nothing is committed, and the records stay for others.
func readTopic(ctx context.Context, c *common, topic string, since time.Time, fn func(*kgo.Record)) error {
	admin, err := openKafka(ctx, c)
	if err != nil {
		return err
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return errors.Newf("Kafka at %s has no topic %s: is it saga's?", c.brokers, topic)
	}
	if err != nil {
		return errors.Wrapf(err, "read the end of %s", topic)
	}
	var starts kadm.ListedOffsets
	if since.IsZero() {
		starts, err = adm.ListStartOffsets(ctx, topic)
	} else {
		starts, err = adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic)
	}
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return errors.Wrapf(err, "read the start of %s", topic)
	}
	from := map[int32]kgo.Offset{}
	end := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		start, ok := starts.Lookup(topic, o.Partition)
		if ok && start.Offset >= 0 && start.Offset < o.Offset {
			from[o.Partition], end[o.Partition] = kgo.NewOffset().At(start.Offset), o.Offset
		}
	})
	if len(end) == 0 {
		return nil
	}
	consumer, err := openKafka(ctx, c, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
	if err != nil {
		return err
	}
	defer consumer.Close()
	for len(end) > 0 {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			return errors.Wrapf(ctx.Err(), "read %s (%d partitions left)", topic, len(end))
		}
		var fetchErr error
		fetches.EachError(func(_ string, _ int32, err error) { fetchErr = errors.CombineErrors(fetchErr, err) })
		if fetchErr != nil {
			return errors.Wrapf(fetchErr, "read %s", topic)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			last, reading := end[r.Partition]
			if !reading || r.Offset >= last {
				return // written after the command started
			}
			fn(r)
			if r.Offset == last-1 {
				delete(end, r.Partition)
			}
		})
	}
	return nil
}

// parseSince reads --since: an RFC 3339 time, or a duration meaning that
// long ago.
func parseSince(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, errors.Newf("--since must be an RFC 3339 time (2026-11-22T10:00:00Z) or a duration (2h), not %q", s)
	}
	return t, nil
}

// header returns the value of a record's header, "" when it has none.
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
