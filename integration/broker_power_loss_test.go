package integration_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestBrokerPowerLossSkipsNoNewOrder replays issue 11's audit: the
// submitter has committed past orders that a power loss then takes from the
// log (records it read before they were fsynced and acknowledged: only those
// can go), and new orders reuse their offsets. Every new order must become a
// task; without the broker's clamp of stale commits, all 60 are skipped
// silently here.
func TestBrokerPowerLossSkipsNoNewOrder(t *testing.T) {
	s := startSystem(t, engine.Config{Partitions: 1})
	before := orderIDs("before-power-loss", 60)
	s.publishOrders(before)
	s.awaitTasks(before, 60*time.Second, func(t *domain.Task) bool { return t.Exists() })
	s.stop() // the submitter commits all 60

	// The power goes: the orders log loses its tail, the commit stays.
	segments, err := filepath.Glob(filepath.Join(s.cfg.DataDir, "kafka", "partitions", protocol.OrdersTopic+"-*", "*.dat"))
	require.NoError(t, err)
	require.NotEmpty(t, segments)
	for _, path := range segments {
		info, err := os.Stat(path)
		require.NoError(t, err)
		require.NoError(t, os.Truncate(path, info.Size()/2))
	}
	snapshots, _ := filepath.Glob(filepath.Join(s.cfg.DataDir, "kafka", "partitions", "*", "snapshot.json"))
	for _, path := range snapshots {
		if strings.Contains(path, protocol.OrdersTopic+"-") {
			require.NoError(t, os.Remove(path))
		}
	}

	// The new orders arrive before the submitter fetches (otherwise its
	// first fetch, past the log end, would reset it to the start and hide
	// the skip): the first start runs no submitter.
	all := s.cfg.Roles
	s.cfg.Roles = []engine.Role{engine.RoleScheduler, engine.RoleSupervisor, engine.RoleAgents}
	s.start()
	after := orderIDs("after-power-loss", 60)
	s.publishOrders(after)
	s.stop()
	s.cfg.Roles = all
	s.start()
	s.awaitTasks(after, 60*time.Second, func(t *domain.Task) bool { return t.Exists() })
}
