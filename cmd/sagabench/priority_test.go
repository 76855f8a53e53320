package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

func TestPriorityMixSpreadsOrdersInItsShares(t *testing.T) {
	m, err := parsePriorityMix("high=10,normal=60,low=30")
	require.NoError(t, err)
	counts := map[domain.Priority]int{}
	for i := range 1000 {
		counts[m.of(i)]++
	}
	assert.Equal(t, map[domain.Priority]int{domain.PriorityHigh: 100, domain.PriorityNormal: 600, domain.PriorityLow: 300}, counts)
	for _, bad := range []string{"urgent=1", "high", "high=-1", "high=0", "high=x"} {
		_, err := parsePriorityMix(bad)
		assert.Error(t, err, bad)
	}
	none, err := parsePriorityMix("")
	require.NoError(t, err)
	assert.Empty(t, none.of(3))
}
