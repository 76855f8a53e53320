package kafka

import (
	"context"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// SplitBrokers parses a comma-separated broker list.
func SplitBrokers(list string) []string {
	var out []string
	for _, b := range strings.Split(list, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// NewClient connects to the brokers with saga's producer defaults: every
// record acknowledged by all in-sync replicas, idempotent, lingering a
// little so concurrent records share a request, and commands routed to the
// agent instance the scheduler chose.
func NewClient(brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.AllowAutoTopicCreation(),
		kgo.ProducerBatchMaxBytes(MaxRecordBytes + 1<<20),
		// Keyed records go to the partition of their key's murmur2 hash,
		// as with franz-go's default; a command routed to an agent
		// instance goes to that instance's partition (routeTo).
		kgo.RecordPartitioner(routedPartitioner{kgo.StickyKeyPartitioner(nil)}),
	}
	client, err := kgo.NewClient(append(base, opts...)...)
	return client, errors.Wrapf(err, "kafka client for %v", brokers)
}

// EnsureTopics creates the topics that do not exist yet.
func EnsureTopics(ctx context.Context, client *kgo.Client, partitions int32, topics ...string) error {
	adm := kadm.NewClient(client)
	resp, err := adm.CreateTopics(ctx, partitions, -1, nil, topics...)
	if err != nil {
		return errors.Wrap(err, "create topics")
	}
	for _, t := range resp.Sorted() {
		if t.Err != nil && !errors.Is(t.Err, kerr.TopicAlreadyExists) {
			return errors.Wrapf(t.Err, "create topic %s", t.Topic)
		}
	}
	return nil
}
