package integration_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/topics"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestOversizedOrderIsDeadLetteredByReference sends a 20 MiB order, too
// large to copy to saga.deadletter, on an orders topic that accepts it: it
// is dead-lettered by reference (its source, size, first bytes and the
// reason), a good order after it succeeds, and the submitter's committed
// offset moves past it, so that the partition can be trimmed.
func TestOversizedOrderIsDeadLetteredByReference(t *testing.T) {
	s := startSystem(t, engine.Config{})
	const big = 20 << 20
	admin := kadm.NewClient(s.producer())
	maxBytes := strconv.Itoa(2 * big)
	altered, err := admin.AlterTopicConfigs(ctx(t, 10*time.Second),
		[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &maxBytes}}, protocol.OrdersTopic)
	require.NoError(t, err)
	for _, a := range altered {
		require.NoError(t, a.Err)
	}

	client, err := kgo.NewClient(kgo.SeedBrokers(s.app.KafkaBrokers...), kgo.ProducerBatchMaxBytes(2*big), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(client.Close)
	body := `{"orderId":"big-1","pad":"` + strings.Repeat("é", (big-40)/2) + `"}`
	produced, err := client.ProduceSync(ctx(t, 30*time.Second),
		&kgo.Record{Topic: protocol.OrdersTopic, Partition: 0, Key: []byte("big-1"), Value: []byte(body)}).First()
	require.NoError(t, err)
	require.NoError(t, client.ProduceSync(ctx(t, 10*time.Second),
		&kgo.Record{Topic: protocol.OrdersTopic, Partition: 0, Key: []byte("good-after-big"), Value: []byte(`{"orderId":"good-after-big"}`)}).FirstErr())
	assert.Equal(t, domain.StateProcessed, s.awaitTerminal([]string{"good-after-big"}, 60*time.Second)["good-after-big"].State)

	dead := s.consumeTopic(protocol.DeadLetterTopic, 1, 30*time.Second)
	require.Len(t, dead, 1)
	d := topics.NewDeadLetter(dead[0])
	assert.True(t, d.ByReference)
	assert.Equal(t, len(body), d.Size)
	assert.Equal(t, "big-1", d.Key)
	assert.Contains(t, d.Reason, "over the limit")
	assert.Equal(t, protocol.OrdersTopic, d.SourceTopic)
	require.NotNil(t, d.SourcePartition)
	require.NotNil(t, d.SourceOffset)
	assert.Equal(t, produced.Partition, *d.SourcePartition)
	assert.Equal(t, produced.Offset, *d.SourceOffset)
	assert.LessOrEqual(t, len(dead[0].Value), kafka.DeadLetterPrefixBytes)
	require.NotNil(t, d.Value, "the prefix is cut on a character boundary: still text")
	assert.True(t, strings.HasPrefix(body, *d.Value))

	require.Eventually(t, func() bool {
		offsets, err := admin.FetchOffsets(ctx(t, 5*time.Second), "saga-submitter")
		if err != nil {
			return false
		}
		o, ok := offsets.Lookup(protocol.OrdersTopic, produced.Partition)
		return ok && o.At > produced.Offset+1
	}, 30*time.Second, 50*time.Millisecond, "the submitter commits past the oversized order and the good one")
}

// TestWorkflowVersionWithoutWorkflowIsDeadLettered: an order asking for a
// version of no workflow is refused with the reason, not run on the
// newest version of the default workflow.
func TestWorkflowVersionWithoutWorkflowIsDeadLettered(t *testing.T) {
	s := startSystem(t, engine.Config{})
	s.publish("versioned", []byte(`{"orderId":"versioned","workflowVersion":1}`))
	dead := s.consumeTopic(protocol.DeadLetterTopic, 1, 30*time.Second)
	d := topics.NewDeadLetter(dead[0])
	assert.Equal(t, "versioned", d.Key)
	assert.Contains(t, d.Reason, "workflowVersion 1 needs workflow")
	assert.False(t, d.ByReference)
	_, ok, err := s.app.Tasks.Get(ctx(t, 5*time.Second), "versioned")
	require.NoError(t, err)
	assert.False(t, ok, "no task")
}

// TestSubmitWithoutWaitLeavesNoReplyTopicBehind: sagactl submit without
// --wait names no reply topic (a private one was deleted on exit while the
// task still sent statuses there, each a dead letter), yet still says
// whether saga accepted or refused the order.
func TestSubmitWithoutWaitLeavesNoReplyTopicBehind(t *testing.T) {
	s := startSystem(t, engine.Config{})
	out, code := s.sagactl("submit", "nowait-1", `{"note":"x"}`, "--timeout", "30s")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "received")

	orders := s.consumeTopic(protocol.OrdersTopic, 1, 10*time.Second)
	var order map[string]any
	require.NoError(t, json.Unmarshal(orders[0].Value, &order))
	assert.NotContains(t, order, "replyTo", "no reply topic to be deleted under the task")

	assert.Equal(t, domain.StateProcessed, s.awaitTerminal([]string{"nowait-1"}, 30*time.Second)["nowait-1"].State)
	require.Eventually(t, func() bool {
		return s.metric("saga_statuses_published_total") != "" && s.metric("saga_statuses_published_total") != "0"
	},
		10*time.Second, 20*time.Millisecond)
	assert.Equal(t, "0", s.metric("saga_statuses_undeliverable_total"))

	out, code = s.sagactl("submit", "nowait-2", "--workflow", "nope", "--timeout", "30s")
	assert.Equal(t, 5, code, out)
	assert.Contains(t, out, "rejected")
	assert.Contains(t, out, "unknown workflow")
}
