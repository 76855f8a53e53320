package kafka

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/processes"
)

// PartitionOwnership says which tasks a consumer-group member owns: those
// whose id hashes, with Kafka's default partitioner (murmur2), to a
// partition of the topic it is assigned. Schedulers use it to share tasks.
type PartitionOwnership struct {
	topic      string
	partitions int
	partition  kgo.TopicPartitioner

	mu    sync.RWMutex
	owned map[int32]bool
}

var _ processes.Ownership = (*PartitionOwnership)(nil)

// NewPartitionOwnership looks up how many partitions topic has.
func NewPartitionOwnership(ctx context.Context, client *kgo.Client, topic string) (*PartitionOwnership, error) {
	topics, err := kadm.NewClient(client).ListTopics(ctx, topic)
	if err != nil {
		return nil, err
	}
	td, ok := topics[topic]
	if !ok {
		return nil, errors.Newf("topic %s not found", topic)
	}
	if td.Err != nil {
		return nil, td.Err
	}
	return &PartitionOwnership{topic: topic, partitions: len(td.Partitions),
		partition: kgo.StickyKeyPartitioner(nil).ForTopic(topic), owned: map[int32]bool{}}, nil
}

// Owns reports whether the task's partition is assigned to this member.
func (o *PartitionOwnership) Owns(taskID string) bool {
	p := int32(o.partition.Partition(&kgo.Record{Key: []byte(taskID)}, o.partitions))
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.owned[p]
}

// Assigned and Revoked keep the ownership in step with the group's
// assignment; plug them into ConsumerConfig.OnAssigned and OnRevoked.
func (o *PartitionOwnership) Assigned(m map[string][]int32) { o.update(m, true) }

// Revoked: see Assigned.
func (o *PartitionOwnership) Revoked(m map[string][]int32) { o.update(m, false) }

func (o *PartitionOwnership) update(m map[string][]int32, held bool) {
	o.mu.Lock()
	for _, p := range m[o.topic] {
		if held {
			o.owned[p] = true
		} else {
			delete(o.owned, p)
		}
	}
	o.mu.Unlock()
}
