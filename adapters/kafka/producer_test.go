package kafka_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/topics"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
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

// TestDeadLetterTooLargeForTheBrokerGoesByReference dead-letters a message
// the dead-letter topic is too small for, and one over the producer's own
// bound: both go by reference, with the source, size, the reason and the
// value's start cut on a character boundary, instead of failing for ever.
func TestDeadLetterTooLargeForTheBrokerGoesByReference(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(client.Close)
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	small := "65536"
	_, err = kadm.NewClient(client).CreateTopic(c, 1, 1, map[string]*string{"max.message.bytes": &small}, protocol.DeadLetterTopic)
	require.NoError(t, err)

	p := kafka.NewProducer(client, "saga/test", nil)
	// Random letters, so that compression does not shrink it under the
	// topic's limit; two-byte letters, so that a cut may fall inside one.
	rnd := rand.New(rand.NewPCG(1, 2))
	var pad strings.Builder
	for range 100_000 {
		pad.WriteRune(rune(0xC0 + rnd.IntN(0x100)))
	}
	value := []byte(`{"orderId":"o-1","pad":"` + pad.String() + `"}`)
	msg := processes.Inbound{Topic: "orders", Partition: 2, Offset: 7, Key: "o-1", Value: value, Headers: processes.Headers{{Key: "ce_type", Value: "order"}}}
	require.NoError(t, p.DeadLetter(c, msg, "refused by the broker"))
	p.MaxDeadLetterBytes = 1 << 10
	msg.Offset = 8
	require.NoError(t, p.DeadLetter(c, msg, "over our own bound"))

	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(protocol.DeadLetterTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	var dead []*kgo.Record
	for len(dead) < 2 {
		f := cl.PollFetches(c)
		require.NoError(t, c.Err())
		dead = append(dead, f.Records()...)
	}
	for i, r := range dead {
		d := topics.NewDeadLetter(r)
		assert.True(t, d.ByReference, "%d", i)
		assert.Equal(t, len(value), d.Size)
		assert.Equal(t, "orders/2/"+strconv.Itoa(7+i), d.Source)
		assert.Equal(t, []string{"refused by the broker", "over our own bound"}[i], d.Reason)
		assert.Equal(t, map[string]string{"ce_type": "order"}, d.Headers)
		assert.LessOrEqual(t, len(r.Value), kafka.DeadLetterPrefixBytes)
		assert.True(t, utf8.Valid(r.Value), "cut on a character boundary")
		assert.True(t, bytes.HasPrefix(value, r.Value))
	}
}
