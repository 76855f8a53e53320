package kafka

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

var _ processes.CommandRouter = (*AgentDirectory)(nil)

// RouteCommand maps the agent instance a dispatch names to a partition it
// consumes (CommandRoute), from its last heartbeat.
func (d *AgentDirectory) RouteCommand(agent, instance, topic string, now time.Time) (*protocol.Route, bool) {
	return CommandRoute(d.Instances(agent, now), agent, instance, topic)
}

// CommandRoute is where a command for instance goes, among the live
// instances of agent: a partition, picked at random, that the instance
// consumes of topic (the command's band) or, when it has none of that
// band, of the agent's other command topics, highest first. ok is false
// when the instance announced none (the command then goes by task id).
func CommandRoute(instances []protocol.AgentHeartbeat, agent, instance, topic string) (*protocol.Route, bool) {
	if instance == "" {
		return nil, false
	}
	for _, h := range instances {
		if h.Instance != instance {
			continue
		}
		for _, t := range append([]string{topic}, protocol.CommandTopics(agent)...) {
			if parts := h.Partitions[t]; len(parts) > 0 {
				return &protocol.Route{Instance: instance, Topic: t, Partition: parts[rand.IntN(len(parts))]}, true
			}
		}
		return nil, false
	}
	return nil, false
}

// routeKey is the context key of a record's chosen partition.
type routeKey struct{}

// routeTo marks a record to be produced to partition p rather than to the
// partition of its key.
func routeTo(r *kgo.Record, p int32) {
	ctx := r.Context
	if ctx == nil {
		ctx = context.Background()
	}
	r.Context = context.WithValue(ctx, routeKey{}, p)
}

// routedPartitioner produces a record marked by routeTo to its partition,
// and any other as base does. Commands the scheduler routed to an agent
// instance go to a partition that instance consumes; everything else keeps
// its partition by key.
type routedPartitioner struct{ base kgo.Partitioner }

func (p routedPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	base := p.base.ForTopic(topic)
	if nb, ok := base.(kgo.TopicPartitionerOnNewBatch); ok {
		return routedOnNewBatch{routedTopic{base}, nb}
	}
	return routedTopic{base}
}

type routedTopic struct{ base kgo.TopicPartitioner }

func (t routedTopic) RequiresConsistency(r *kgo.Record) bool {
	_, routed := routedPartition(r)
	return routed || t.base.RequiresConsistency(r)
}

func (t routedTopic) Partition(r *kgo.Record, n int) int {
	if p, ok := routedPartition(r); ok && int(p) < n && p >= 0 {
		return int(p)
	}
	return t.base.Partition(r, n)
}

type routedOnNewBatch struct {
	routedTopic
	nb kgo.TopicPartitionerOnNewBatch
}

func (t routedOnNewBatch) OnNewBatch() { t.nb.OnNewBatch() }

func routedPartition(r *kgo.Record) (int32, bool) {
	if r.Context == nil {
		return 0, false
	}
	p, ok := r.Context.Value(routeKey{}).(int32)
	return p, ok
}
