package kafka_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestCommandRouteMapsAnInstanceToAPartitionItConsumes: a command named
// for an instance goes to a partition the instance consumes of its band's
// topic, else of the agent's other command topics, highest first; for an
// instance that announced none, or that is not live, it goes by task id.
func TestCommandRouteMapsAnInstanceToAPartitionItConsumes(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	high, normal, low := protocol.CommandTopicFor("pay", domain.PriorityHigh), protocol.CommandTopic("pay"), protocol.CommandTopicFor("pay", domain.PriorityLow)
	instances := []protocol.AgentHeartbeat{
		{Agent: "pay", Instance: "p-1", At: at, Partitions: map[string][]int32{high: {4}, normal: {1, 2}, low: {7}}},
		{Agent: "pay", Instance: "p-2", At: at, Partitions: map[string][]int32{normal: {5}, low: {6}}},
		{Agent: "pay", Instance: "p-3", At: at},
	}
	seen := map[int32]bool{}
	for range 200 {
		r, ok := kafka.CommandRoute(instances, "pay", "p-1", normal)
		if assert.True(t, ok) {
			assert.Equal(t, protocol.Route{Instance: "p-1", Topic: normal, Partition: r.Partition}, *r)
			seen[r.Partition] = true
		}
	}
	assert.Equal(t, map[int32]bool{1: true, 2: true}, seen, "a partition of the band's topic, picked at random")

	r, ok := kafka.CommandRoute(instances, "pay", "p-2", high)
	assert.True(t, ok)
	assert.Equal(t, protocol.Route{Instance: "p-2", Topic: normal, Partition: 5}, *r, "no partition of the band: the highest other")

	for _, instance := range []string{"p-3", "p-9", ""} {
		_, ok := kafka.CommandRoute(instances, "pay", instance, normal)
		assert.False(t, ok, "%q goes by task id", instance)
	}
}
