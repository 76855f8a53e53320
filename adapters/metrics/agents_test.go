package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/metrics"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestAgentGaugesFollowTheLiveInstances: each scrape reports the instances
// live then, so an instance that is gone leaves no series behind.
func TestAgentGaugesFollowTheLiveInstances(t *testing.T) {
	m := metrics.New()
	live := []protocol.AgentHeartbeat{
		{Agent: "payment", Instance: "pay-1", Health: protocol.HealthTrial, Capacity: 8, InFlight: 1, Waiting: map[domain.Priority]int{domain.PriorityLow: 4}},
		{Agent: "payment", Instance: "pay-2", Health: protocol.HealthHealthy, Capacity: 4, InFlight: 3},
	}
	m.WatchAgents(func() []protocol.AgentHeartbeat { return live }, func(context.Context) (map[string]map[domain.Priority]int64, error) {
		return map[string]map[domain.Priority]int64{"payment": {domain.PriorityHigh: 5}}, nil
	})
	scrape := func() map[string]map[string]float64 {
		var out bytes.Buffer
		require.NoError(t, m.Write(&out))
		var parser expfmt.TextParser
		families, err := parser.TextToMetricFamilies(&out)
		require.NoError(t, err)
		got := map[string]map[string]float64{}
		for _, name := range []string{metrics.AgentInstanceHealth, metrics.AgentInstanceCapacity, metrics.AgentInstanceInFlight, metrics.AgentInstanceWaiting, metrics.AgentQueued} {
			got[name] = map[string]float64{}
			for _, s := range families[name].GetMetric() {
				key := "" // label values, by label name
				for _, l := range s.GetLabel() {
					key += l.GetValue() + "/"
				}
				got[name][key] = s.GetGauge().GetValue()
			}
		}
		return got
	}
	got := scrape()
	assert.Equal(t, 1.0, got[metrics.AgentInstanceHealth]["payment/trial/pay-1/"])
	assert.Equal(t, 0.0, got[metrics.AgentInstanceHealth]["payment/healthy/pay-1/"])
	assert.Len(t, got[metrics.AgentInstanceHealth], 8, "four health values per instance")
	assert.Equal(t, 4.0, got[metrics.AgentInstanceCapacity]["payment/pay-2/"])
	assert.Equal(t, 3.0, got[metrics.AgentInstanceInFlight]["payment/pay-2/"])
	assert.Equal(t, 4.0, got[metrics.AgentInstanceWaiting]["payment/pay-1/low/"])
	assert.Equal(t, 5.0, got[metrics.AgentQueued]["payment/high/"])
	assert.Equal(t, 0.0, got[metrics.AgentQueued]["payment/low/"])

	live = live[1:] // pay-1 is gone
	got = scrape()
	assert.NotContains(t, got[metrics.AgentInstanceCapacity], "payment/pay-1/")
	assert.Len(t, got[metrics.AgentInstanceHealth], 4)
}

// TestScrapeAnswersWhileTheBrokerDoesNot: a read of the broker that hangs
// (a partition) holds a scrape ScrapeWait at most; the scrape after it
// has finished reports its result, and one after a failed read leaves the
// family out rather than report a stale value.
func TestScrapeAnswersWhileTheBrokerDoesNot(t *testing.T) {
	m := metrics.New()
	answer := make(chan error)
	m.WatchAgents(func() []protocol.AgentHeartbeat { return nil }, func(ctx context.Context) (map[string]map[domain.Priority]int64, error) {
		select {
		case err := <-answer:
			if err != nil {
				return nil, err
			}
			return map[string]map[domain.Priority]int64{"payment": {domain.PriorityHigh: 5}}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	scrape := func() string {
		var out bytes.Buffer
		require.NoError(t, m.Write(&out))
		return out.String()
	}
	began := time.Now()
	assert.NotContains(t, scrape(), metrics.AgentQueued+"{", "no read has answered yet")
	assert.Less(t, time.Since(began), metrics.ScrapeWait+time.Second, "the scrape waited for the hanging read")
	answer <- nil // the read the first scrape started answers
	require.Eventually(t, func() bool {
		return strings.Contains(scrape(), metrics.AgentQueued+`{agent="payment",priority="high"} 5`)
	},
		5*time.Second, 10*time.Millisecond)
	go func() { answer <- errors.New("broker unreachable") }()
	require.Eventually(t, func() bool { return !strings.Contains(scrape(), metrics.AgentQueued+"{") }, 5*time.Second, 10*time.Millisecond)
}
