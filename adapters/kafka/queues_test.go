package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestCommandQueuesCountWhatTheGroupHasNotCommitted: per band, the records
// past the agent group's committed offset, or all of them where it
// committed none; a band without a topic holds none.
func TestCommandQueuesCountWhatTheGroupHasNotCommitted(t *testing.T) {
	_, client := directoryBroker(t)
	ctx := testContext(t)
	adm := kadm.NewClient(client)
	high, normal := protocol.CommandTopicFor("pay", domain.PriorityHigh), protocol.CommandTopicFor("pay", domain.PriorityNormal)
	require.NoError(t, kafka.EnsureTopics(ctx, client, 1, high, normal))
	var records []*kgo.Record
	for range 3 {
		records = append(records, &kgo.Record{Topic: high, Value: []byte("{}")})
	}
	for range 2 {
		records = append(records, &kgo.Record{Topic: normal, Value: []byte("{}")})
	}
	require.NoError(t, client.ProduceSync(ctx, records...).FirstErr())
	offsets := kadm.Offsets{}
	offsets.Add(kadm.Offset{Topic: high, Partition: 0, At: 1, LeaderEpoch: -1})
	_, err := adm.CommitOffsets(ctx, kafka.AgentGroup("pay"), offsets)
	require.NoError(t, err)

	queues, err := kafka.CommandQueues(ctx, adm, "pay", "idle", "no such/agent")
	require.NoError(t, err)
	assert.Equal(t, map[string]map[domain.Priority]int64{
		"pay":  {domain.PriorityHigh: 2, domain.PriorityNormal: 2, domain.PriorityLow: 0},
		"idle": {domain.PriorityHigh: 0, domain.PriorityNormal: 0, domain.PriorityLow: 0},
	}, queues, "a name no agent can have is left out, and does not fail the others")
}
