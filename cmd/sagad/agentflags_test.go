package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAgentFlagsParse: the agent flags take comma-separated or repeated
// AGENT=VALUE pairs and refuse what they cannot use.
func TestAgentFlagsParse(t *testing.T) {
	capacity := agentCounts{}
	require.NoError(t, capacity.Set("payment=8,inventory=16"))
	require.NoError(t, capacity.Set("shipping=2"))
	assert.Equal(t, agentCounts{"payment": 8, "inventory": 16, "shipping": 2}, capacity)
	for _, bad := range []string{"payment", "payment=", "=8", "payment=0", "payment=x"} {
		assert.Error(t, agentCounts{}.Set(bad), bad)
	}

	rates := agentRates{}
	require.NoError(t, rates.Set("payment=50/1s,inventory=5/250ms"))
	assert.Equal(t, agentRates{"payment": {Calls: 50, PeriodMillis: 1000}, "inventory": {Calls: 5, PeriodMillis: 250}}, rates)
	for _, bad := range []string{"payment=50", "payment=0/1s", "payment=5/0s", "payment=5/soon", "payment=5/100us"} {
		assert.Error(t, agentRates{}.Set(bad), bad)
	}

	hang := agentDurations{}
	require.NoError(t, hang.Set("payment=5s"))
	assert.Equal(t, agentDurations{"payment": 5 * time.Second}, hang)
	assert.Error(t, agentDurations{}.Set("payment=-1s"))
}
