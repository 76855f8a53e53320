package main

import (
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/topics"
)

// openKafka connects to the brokers with the security flags and makes sure
// they answer within a few seconds, so that a command never waits
// silently on a broker that is not there.
func openKafka(ctx context.Context, c *common, opts ...kgo.Opt) (*kgo.Client, error) {
	kafkaOpts, err := c.kafkaOpts()
	if err != nil {
		return nil, err
	}
	return topics.Dial(kafka.SplitBrokers(c.brokers), c.security.Explain, kafkaOpts...)(ctx, opts...)
}

// readTopic hands fn every record of topic from its oldest (or the first
// written at or after since) up to its end when it is called, without a
// consumer group (topics.Read).
func readTopic(ctx context.Context, c *common, topic string, since time.Time, fn func(*kgo.Record)) error {
	err := topics.Read(ctx, c.opener(), topic, since, fn)
	if errors.Is(err, topics.ErrNoTopic) {
		return errors.Newf("Kafka at %s has no topic %s: is it saga's?", c.brokers, topic)
	}
	return err
}

// opener connects to Kafka as openKafka does, for package topics.
func (c *common) opener() topics.Open {
	return func(ctx context.Context, opts ...kgo.Opt) (*kgo.Client, error) { return openKafka(ctx, c, opts...) }
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
