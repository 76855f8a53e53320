package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// produceHeartbeats writes heartbeats to saga.agents as agent instances
// would, keyed by instance.
func (s *saga) produceHeartbeats(beats ...protocol.AgentHeartbeat) {
	s.t.Helper()
	var records []*kgo.Record
	for _, h := range beats {
		body, err := json.Marshal(h)
		require.NoError(s.t, err)
		records = append(records, &kgo.Record{Key: []byte(h.Instance), Value: body})
	}
	s.publish(protocol.AgentsTopic, records...)
}

// TestAgentsShowsInstancesAndQueues: heartbeats of two payment instances
// (one unhealthy, its reason carrying a terminal escape), one that is gone,
// one of an agent no workflow names, plus a command queued for that agent,
// and one naming an agent saga cannot have, as sagactl agents shows them; the demo agents are told to send no
// heartbeats, so that they show without instances.
func TestAgentsShowsInstancesAndQueues(t *testing.T) {
	s := startSaga(t, engine.Config{Workflows: testWorkflows(time.Second), AgentInstances: engine.AgentInstances{HeartbeatEvery: -1}})
	now := time.Now().UTC()
	beat := func(agent, instance, health, reason string, expires time.Duration) protocol.AgentHeartbeat {
		return protocol.AgentHeartbeat{Agent: agent, Instance: instance, Health: health, Reason: reason, Capacity: 4, InFlight: 1,
			Waiting: map[domain.Priority]int{domain.PriorityHigh: 2}, StartedAt: now.Add(-time.Minute), At: now, ExpiresAt: now.Add(expires)}
	}
	s.produceHeartbeats(beat("payment", "pay-1", protocol.HealthHealthy, "", time.Hour),
		beat("payment", "pay-2", protocol.HealthUnhealthy, "breaker open: \x1b[2J503", time.Hour),
		beat("payment", "pay-old", protocol.HealthHealthy, "", -10*time.Second),
		beat("stray", "stray-1", protocol.HealthTrial, "", time.Hour),
		beat("évil agent/..", "evil-1", protocol.HealthHealthy, "", time.Hour))
	client, err := kafka.NewClient(s.app.KafkaBrokers)
	require.NoError(t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: protocol.CommandTopicFor("stray", domain.PriorityHigh), Value: []byte("{}")}).FirstErr())

	var list protocol.AgentList
	require.Eventually(t, func() bool {
		s.runJSON(&list, "agents")
		return len(list.Agents) == 5 && list.Agents[1].Totals.Live == 2 && list.Agents[3].Queued[domain.PriorityHigh] == 1
	}, 30*time.Second, 100*time.Millisecond, "the heartbeats and the queued command show: %+v", list)
	names := []string{}
	for _, a := range list.Agents {
		names = append(names, a.Name)
	}
	assert.Equal(t, []string{"inventory", "payment", "shipping", "stray", "évil agent/.."}, names)
	assert.NotEmpty(t, list.Agents[4].QueueError, "a name no agent can have has no queues, and fails no other agent's")
	payment := list.Agents[1]
	assert.True(t, payment.Registered)
	require.Len(t, payment.Instances, 3)
	assert.True(t, payment.Instances[2].Gone, "pay-old")
	assert.Equal(t, protocol.AgentTotals{Live: 2, Healthy: 1, Capacity: 4, InFlight: 2, Room: 3, Waiting: map[domain.Priority]int{domain.PriorityHigh: 4}}, payment.Totals)
	assert.Empty(t, list.Agents[0].Instances, "inventory sends no heartbeats")
	assert.False(t, list.Agents[3].Registered)

	out, errOut, code := s.run("agents")
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{"AGENT", "QUEUED H/N/L", "no instance sends heartbeats", "1/2 healthy", "pay-2", "gone (healthy)",
		`breaker open: \x1b[2J503`, "no registered workflow names it", "1/0/0"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "\x1b", "no terminal escape reaches the screen")

	var one protocol.AgentView
	s.runJSON(&one, "agents", "payment")
	assert.Equal(t, "payment", one.Name)
	assert.Len(t, one.Instances, 3)
	_, errOut, code = s.run("agents", "nobody")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "404")

	out, _, code = s.run("completion", "bash")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "agents)")
}
