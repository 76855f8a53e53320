package kafka

import (
	"context"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka/broker"
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
// record acknowledged by all in-sync replicas, idempotent, sent without
// lingering, and commands routed to the agent instance the scheduler chose.
// No linger: on loopback a request costs less than waiting would, and the
// records produced while a request is in flight still share the next one.
func NewClient(brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	return newClient(brokers, true, opts...)
}

// NewClientForExistingTopics is NewClient for a client that must not create
// topics by naming them: a produce to a topic that does not exist fails at
// once (UNKNOWN_TOPIC_OR_PARTITION) instead. The submitter tells the caller
// of a refused order through it, so that an order naming a new reply topic
// creates none.
func NewClientForExistingTopics(brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	return newClient(brokers, false, append([]kgo.Opt{kgo.UnknownTopicRetries(0)}, opts...)...)
}

// NewStatusClient is NewClient for the status publisher: a reply topic
// the broker does not create (the embedded broker's topic cap) fails its
// status at once, to be dead-lettered, instead of after four metadata
// retries. In a flood of orders naming new reply topics those retries held
// back every other status, a waiting caller's included.
func NewStatusClient(brokers []string, opts ...kgo.Opt) (*kgo.Client, error) {
	return newClient(brokers, true, append([]kgo.Opt{kgo.UnknownTopicRetries(0)}, opts...)...)
}

func newClient(brokers []string, autoCreate bool, opts ...kgo.Opt) (*kgo.Client, error) {
	base := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchMaxBytes(broker.MaxRecordBytes + 1<<20),
		// Keyed records go to the partition of their key's murmur2 hash,
		// as with franz-go's default; a command routed to an agent
		// instance goes to that instance's partition (routeTo).
		kgo.RecordPartitioner(routedPartitioner{kgo.StickyKeyPartitioner(nil)}),
	}
	if autoCreate {
		base = append(base, kgo.AllowAutoTopicCreation())
	}
	client, err := kgo.NewClient(append(base, opts...)...)
	return client, errors.Wrapf(err, "kafka client for %v", brokers)
}

// Names of the producer compression codecs CompressionOpt accepts; they
// are the values of sagad's --kafka-compression besides auto.
const (
	CompressionNone   = "none"
	CompressionSnappy = "snappy"
	CompressionLZ4    = "lz4"
	CompressionZstd   = "zstd"
	CompressionGzip   = "gzip"
)

// CompressionNames lists the names CompressionOpt accepts.
var CompressionNames = []string{CompressionNone, CompressionSnappy, CompressionLZ4, CompressionZstd, CompressionGzip}

// ErrUnknownCompression is returned by CompressionOpt for a name that is
// not one of CompressionNames.
var ErrUnknownCompression = errors.New("unknown Kafka compression")

// CompressionOpt is the producer option that compresses every record batch
// with the named codec (one of CompressionNames); none sends batches
// uncompressed and spends no CPU on it. A codec the broker does not
// support falls back to none, and a batch that compression does not make
// smaller is sent uncompressed, as with franz-go's default (snappy).
// Consumers read every codec whatever their own setting. The option may
// be given to any number of clients, made concurrently.
func CompressionOpt(name string) (kgo.Opt, error) {
	var codec kgo.CompressionCodec
	switch name {
	case CompressionNone:
		// No preference at all: franz-go then makes no compressor. (A
		// preference slice would be shared by every client given the
		// option, and franz-go writes into it as it makes each one.)
		return kgo.ProducerBatchCompression(), nil
	case CompressionSnappy:
		codec = kgo.SnappyCompression()
	case CompressionLZ4:
		codec = kgo.Lz4Compression()
	case CompressionZstd:
		codec = kgo.ZstdCompression()
	case CompressionGzip:
		codec = kgo.GzipCompression()
	default:
		return nil, errors.Newf("%w %q: want one of %s", ErrUnknownCompression, name, strings.Join(CompressionNames, ", "))
	}
	// The compressor franz-go would make from ProducerBatchCompression,
	// made once here: it is safe for concurrent use by every client.
	compressor, err := kgo.DefaultCompressor(codec, kgo.NoCompression())
	if err != nil {
		return nil, errors.Wrapf(err, "kafka compression %s", name)
	}
	return kgo.WithCompressor(compressor), nil
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
