package integration_test

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
	"github.com/sagaengine/saga/domain"
)

// newestSegment is the newest event-store segment file of a data directory.
func newestSegment(t *testing.T, dataDir string) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dataDir, "eventstore", "*.log"))
	require.NoError(t, err)
	require.NotEmpty(t, segs)
	sort.Strings(segs)
	return segs[len(segs)-1]
}

// TestFaultDataDirectoryCorruptionAndSecondProcess: a second sagad on the
// same data directory is refused at once; a byte flipped in the middle of
// the newest event-store segment makes sagad refuse to start, naming the
// file and the offset, and loses nothing; a torn tail (a crash mid-write)
// is cut and kept aside, and every acknowledged task is still there.
func TestFaultDataDirectoryCorruptionAndSecondProcess(t *testing.T) {
	s := startSystem(t, engine.Config{})
	ids := orderIDs("disk", 20)
	s.publishOrders(ids)
	s.awaitTerminal(ids, 60*time.Second)

	second := s.cfg
	second.KafkaListen, second.EventStoreListen, second.HTTPListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	_, err := engine.Start(second)
	require.ErrorIs(t, err, eslog.ErrLocked, "a second sagad on the same data directory")
	assert.Contains(t, err.Error(), s.cfg.DataDir)

	s.stop()
	segment := newestSegment(t, s.cfg.DataDir)
	original, err := os.ReadFile(segment)
	require.NoError(t, err)
	corrupt := append([]byte(nil), original...)
	corrupt[len(corrupt)/2] ^= 0xff
	require.NoError(t, os.WriteFile(segment, corrupt, 0o644))
	_, err = engine.Start(s.cfg)
	require.ErrorIs(t, err, eslog.ErrCorrupt, "a flipped byte is corruption, not a torn tail")
	assert.Contains(t, err.Error(), filepath.Base(segment))
	assert.Contains(t, err.Error(), "at byte", "the offset is named")
	after, err := os.ReadFile(segment)
	require.NoError(t, err)
	assert.Equal(t, len(corrupt), len(after), "nothing was cut")

	// The operator restores the file; then a crash leaves half a frame.
	torn := append(append([]byte(nil), original...), 0x40, 0x00, 0x00, 0x00, 0x12, 0x34)
	require.NoError(t, os.WriteFile(segment, torn, 0o644))
	s.start()
	kept, err := filepath.Glob(segment + ".torn-*")
	require.NoError(t, err)
	assert.Len(t, kept, 1, "the torn tail's bytes are kept aside")
	tasks := s.awaitTerminal(ids, 30*time.Second)
	for _, id := range ids {
		assert.Equal(t, domain.StateProcessed, tasks[id].State, id)
	}
	info, err := os.Stat(segment)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, info.Size(), int64(len(original)), "nothing acknowledged was cut")
}
