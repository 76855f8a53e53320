package kafka

import (
	"context"
	"slices"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/domain/protocol"
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

// CompactedTopics are the topics saga creates compacted
// (cleanup.policy=compact), with one partition: their newest record per
// key is their content. Retention leaves them alone.
var CompactedTopics = []string{protocol.AgentsTopic}

// EnsureTopics creates the topics that do not exist yet, those of
// CompactedTopics compacted. One of those that exists already but is not
// compacted (created by a client's auto-creation) is made compacted if the
// cluster lets saga alter topic configs; if not, it is left as it is: it
// still works, only holds old records longer.
func EnsureTopics(ctx context.Context, client *kgo.Client, partitions int32, topics ...string) error {
	var plain, compacted []string
	for _, t := range topics {
		if slices.Contains(CompactedTopics, t) {
			compacted = append(compacted, t)
		} else {
			plain = append(plain, t)
		}
	}
	adm := kadm.NewClient(client)
	if len(plain) > 0 {
		if err := createTopics(ctx, adm, partitions, nil, plain); err != nil {
			return err
		}
	}
	if len(compacted) == 0 {
		return nil
	}
	compact := "compact"
	if err := createTopics(ctx, adm, 1, map[string]*string{"cleanup.policy": &compact}, compacted); err != nil {
		return err
	}
	configs, err := adm.DescribeTopicConfigs(ctx, compacted...)
	if err != nil {
		return nil // best effort, as above
	}
	var loose []string
	for _, rc := range configs {
		ok := false
		for _, c := range rc.Configs {
			ok = ok || (c.Key == "cleanup.policy" && c.Value != nil && strings.Contains(*c.Value, "compact"))
		}
		if rc.Err == nil && !ok {
			loose = append(loose, rc.Name)
		}
	}
	if len(loose) > 0 {
		_, _ = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: &compact}}, loose...)
	}
	return nil
}

func createTopics(ctx context.Context, adm *kadm.Client, partitions int32, configs map[string]*string, topics []string) error {
	resp, err := adm.CreateTopics(ctx, partitions, -1, configs, topics...)
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

// ErrTopicNotCompacted is returned, with its cause, when a topic exists but
// could not be checked or made compacted (a cluster's ACLs may forbid
// describing or altering its configuration): it can be used, but a
// compacted topic's readers may then read more than they need.
var ErrTopicNotCompacted = errors.New("topic exists but could not be made compacted")

// EnsureCompactedTopics creates the topics that do not exist yet with
// cleanup.policy=compact (protocol.AgentsTopic), and makes an existing one
// compacted if it is not (a client that produced before the engine started
// may have had it auto-created); ErrTopicNotCompacted when that fails.
// Calling it again changes nothing.
func EnsureCompactedTopics(ctx context.Context, client *kgo.Client, partitions int32, topics ...string) error {
	adm := kadm.NewClient(client)
	compact := "compact"
	resp, err := adm.CreateTopics(ctx, partitions, -1, map[string]*string{"cleanup.policy": &compact}, topics...)
	if err != nil {
		return errors.Wrap(err, "create compacted topics")
	}
	var existing []string
	for _, t := range resp.Sorted() {
		switch {
		case errors.Is(t.Err, kerr.TopicAlreadyExists):
			existing = append(existing, t.Topic)
		case t.Err != nil:
			return errors.Wrapf(t.Err, "create topic %s", t.Topic)
		}
	}
	if len(existing) == 0 {
		return nil
	}
	described, err := adm.DescribeTopicConfigs(ctx, existing...)
	if err != nil {
		return errors.Mark(errors.Wrap(err, "describe compacted topics"), ErrTopicNotCompacted)
	}
	var alter []string
	for _, rc := range described {
		if rc.Err != nil {
			return errors.Mark(errors.Wrapf(rc.Err, "describe topic %s", rc.Name), ErrTopicNotCompacted)
		}
		policy := ""
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" {
				policy = c.MaybeValue()
			}
		}
		if !strings.Contains(policy, "compact") {
			alter = append(alter, rc.Name)
		}
	}
	if len(alter) == 0 {
		return nil
	}
	altered, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: &compact}}, alter...)
	if err != nil {
		return errors.Mark(errors.Wrap(err, "make topics compacted"), ErrTopicNotCompacted)
	}
	for _, a := range altered {
		if a.Err != nil {
			return errors.Mark(errors.Wrapf(a.Err, "make topic %s compacted", a.Name), ErrTopicNotCompacted)
		}
	}
	return nil
}
