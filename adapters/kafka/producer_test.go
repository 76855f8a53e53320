package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestStatusForAMissingReplyTopicIsDeadLettered publishes statuses on a
// broker that does not create topics: the one for an order whose reply
// topic does not exist is counted and dead-lettered with the reason, Flush
// succeeds, and saga.status has every status.
func TestStatusForAMissingReplyTopicIsDeadLettered(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, protocol.StatusTopic, protocol.DeadLetterTopic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.UnknownTopicRetries(1))
	require.NoError(t, err)
	t.Cleanup(client.Close)
	p := kafka.NewProducer(client, "saga/test", nil)
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	p.PublishStatus(c, protocol.TaskStatus{OrderID: "o-1", State: domain.StateProcessing, Revision: 1, ReplyTo: "reply.missing"})
	p.PublishStatus(c, protocol.TaskStatus{OrderID: "o-2", State: domain.StateProcessing, Revision: 1})
	require.NoError(t, p.Flush(c), "a refused reply topic does not fail the flush")
	assert.Equal(t, int64(1), p.UndeliverableStatuses())

	read := func(topic string, n int) []*kgo.Record {
		cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		require.NoError(t, err)
		defer cl.Close()
		var out []*kgo.Record
		for len(out) < n {
			f := cl.PollFetches(c)
			require.NoError(t, c.Err())
			out = append(out, f.Records()...)
		}
		return out
	}
	assert.Len(t, read(protocol.StatusTopic, 2), 2)
	dead := read(protocol.DeadLetterTopic, 1)
	assert.Equal(t, "o-1", string(dead[0].Key))
	var reason string
	for _, h := range dead[0].Headers {
		if h.Key == kafka.HeaderDeadLetterReason {
			reason = string(h.Value)
		}
	}
	assert.Contains(t, reason, "reply.missing")
}

// TestRoutedCommandsGoToTheirInstancesPartition sends commands of one task
// routed to each partition in turn, and one not routed: each routed one
// lands on its partition, the other on its task id's.
func TestRoutedCommandsGoToTheirInstancesPartition(t *testing.T) {
	topic := protocol.CommandTopic("payment")
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	client, err := kafka.NewClient(cluster.ListenAddrs())
	require.NoError(t, err)
	t.Cleanup(client.Close)
	p := kafka.NewProducer(client, "saga/test", nil)
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := protocol.ExecuteStep{TaskID: "o-1", Step: "charge", Agent: "payment", Action: protocol.ActionExecute, Attempt: 1,
		CompleteBy: time.Now().Add(time.Minute), IdempotencyKey: "o-1/charge"}
	for part := int32(0); part < 4; part++ {
		routed := cmd
		routed.Route = &protocol.Route{Instance: "pay-x", Partition: part}
		require.NoError(t, p.SendCommand(c, routed))
	}
	require.NoError(t, p.SendCommand(c, cmd))
	require.NoError(t, client.Flush(c))
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var parts []int32
	for len(parts) < 5 {
		fs := cl.PollFetches(c)
		require.NoError(t, c.Err())
		fs.EachRecord(func(r *kgo.Record) { parts = append(parts, r.Partition) })
	}
	byKey := kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(&kgo.Record{Key: []byte("o-1")}, 4)
	counts := map[int32]int{}
	for _, p := range parts {
		counts[p]++
	}
	want := map[int32]int{0: 1, 1: 1, 2: 1, 3: 1}
	want[int32(byKey)]++
	assert.Equal(t, want, counts)
}
