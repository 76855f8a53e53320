package metrics_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/metrics"
)

// TestLagFollowsGroupsThatAppearLate: groups that do not exist yet at the
// first scrapes (an agent whose consumer group joins after the others)
// get their lag reported once they do. kadm's Lag reuses the slice of
// group names it is given as scratch space; the groups list must survive
// it, or a group that was missing at one read is gone for good.
func TestLagFollowsGroupsThatAppearLate(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "cmds"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	client, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(client.Close)
	admin := kadm.NewClient(client)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	require.NoError(t, client.ProduceSync(ctx, &kgo.Record{Topic: "cmds", Value: []byte("a")}, &kgo.Record{Topic: "cmds", Value: []byte("b")}).FirstErr())
	commit := func(group string) {
		offsets := kadm.Offsets{}
		offsets.Add(kadm.Offset{Topic: "cmds", Partition: 0, At: 1, LeaderEpoch: -1})
		require.NoError(t, admin.CommitAllOffsets(ctx, group, offsets))
	}
	// The existing group among the missing ones: wherever kadm's scratch
	// writes start, they overwrite a name that is still needed.
	var groups []string
	for i := range 6 {
		if i == 3 {
			groups = append(groups, "z-early")
		}
		groups = append(groups, fmt.Sprintf("a-late-%d", i))
	}
	commit("z-early")

	m := metrics.New()
	m.WatchLag(admin, func() []string { return groups })
	scrape := func() string {
		var out bytes.Buffer
		require.NoError(t, m.Write(&out))
		return out.String()
	}
	lagOf := func(group string) string {
		return metrics.ConsumerLag + `{group="` + group + `",topic="cmds"} 1`
	}
	// Several reads while the late groups do not exist yet.
	for range 3 {
		require.Eventually(t, func() bool { return strings.Contains(scrape(), lagOf("z-early")) }, 10*time.Second, 10*time.Millisecond)
	}
	assert.NotContains(t, scrape(), `group="a-late-`, "a group that does not exist has no lag")

	for i := range 6 {
		commit(fmt.Sprintf("a-late-%d", i))
	}
	require.Eventually(t, func() bool {
		got := scrape()
		for i := range 6 {
			if !strings.Contains(got, lagOf(fmt.Sprintf("a-late-%d", i))) {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every group's lag once it exists: %v", groups)
	assert.Equal(t, []string{"a-late-0", "a-late-1", "a-late-2", "z-early", "a-late-3", "a-late-4", "a-late-5"}, groups, "the reads left the list alone")
}
