package integration_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// TestStatusesSurviveAPowerLoss processes orders, stops sagad, and does to
// the status topic's files what a power loss does: each keeps only what was
// fsynced (broker.Broker.ObserveSyncs). Statuses are acknowledged without an
// fsync; the status publisher produces a sync barrier before each
// checkpoint, so the statuses before its checkpoint are on disk and those
// after it are published again at restart. Every order must end up with
// the gapless sequence of its statuses, final one included. Without the
// barrier the cut takes statuses the checkpoint has passed, and they never
// come back.
func TestStatusesSurviveAPowerLoss(t *testing.T) {
	s := startSystem(t, engine.Config{Partitions: 2})
	var mu sync.Mutex
	synced := map[string]int64{}
	s.app.EmbeddedBroker().ObserveSyncs(func(path string, size int64) {
		mu.Lock()
		synced[path] = max(synced[path], size)
		mu.Unlock()
	})
	// Waves of orders, each more than a checkpoint interval after the one
	// before, so that the publisher's checkpoint passes the earlier waves'
	// statuses (it saves one when an event comes that long after the last).
	var ids []string
	for wave := range 4 {
		batch := orderIDs(fmt.Sprintf("status-power-loss-%d", wave), 10)
		s.publishOrders(batch)
		s.awaitTerminal(batch, 60*time.Second)
		ids = append(ids, batch...)
		time.Sleep(processes.DefaultStatusCheckpointEvery + 100*time.Millisecond) // a pace, not a wait for an event
	}
	const perOrder = 8 // received, three steps dispatched and succeeded, processed
	s.consumeTopic(protocol.StatusTopic, perOrder*len(ids), 30*time.Second)
	checkpoint, ok, err := s.app.Store.LoadCheckpoint(ctx(t, 10*time.Second), processes.DefaultStatusCheckpoint)
	require.NoError(t, err)
	require.True(t, ok, "the status publisher saved no checkpoint")
	firstWave := s.stream(ids[0])
	require.Greater(t, checkpoint, firstWave[len(firstWave)-1].Position, "the checkpoint passed the first wave's statuses")
	s.stop()

	// The power goes: every file of saga.status keeps what was fsynced.
	var cut int64
	for part := range 2 {
		dir := filepath.Join(s.cfg.DataDir, "kafka", "partitions", fmt.Sprintf("%s-%d", protocol.StatusTopic, part))
		files, err := filepath.Glob(filepath.Join(dir, "*"))
		require.NoError(t, err)
		for _, path := range files {
			switch filepath.Ext(path) {
			case ".dat", ".idx":
				info, err := os.Stat(path)
				require.NoError(t, err)
				mu.Lock()
				keep := synced[path]
				mu.Unlock()
				if keep < info.Size() {
					cut += info.Size() - keep
					require.NoError(t, os.Truncate(path, keep))
				}
			case ".json": // the partition's state as of the clean stop
				require.NoError(t, os.Remove(path))
			}
		}
	}
	t.Logf("the power loss cut %d bytes of statuses", cut)

	s.start()
	seen := map[string]map[uint64]bool{}
	missing := func() []string {
		var out []string
		for _, id := range ids {
			for rev := range uint64(perOrder) {
				if !seen[id][rev] {
					out = append(out, fmt.Sprintf("%s@%d", id, rev))
				}
			}
		}
		sort.Strings(out)
		return out
	}
	client, err := kgo.NewClient(kgo.SeedBrokers(s.app.KafkaBrokers...), kgo.ConsumeTopics(protocol.StatusTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer client.Close()
	c := ctx(t, 30*time.Second)
	for len(missing()) > 0 && c.Err() == nil {
		client.PollFetches(c).EachRecord(func(r *kgo.Record) {
			var st protocol.TaskStatus
			require.NoError(t, json.Unmarshal(r.Value, &st))
			if seen[st.OrderID] == nil {
				seen[st.OrderID] = map[uint64]bool{}
			}
			seen[st.OrderID][st.Revision] = true
		})
	}
	require.Empty(t, missing(), "statuses lost for good by the power loss (the publisher's checkpoint had passed them)")
}
