package broker_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTornGroupsLogNeverBringsBackAStaleCommit is the chaos test's finding:
// a power loss tore groups.log; kfake left the torn bytes and appended
// after them, so after the next plain restart the group's newest commit was
// ignored and an older one, past records produced since, skipped them.
func TestTornGroupsLogNeverBringsBackAStaleCommit(t *testing.T) {
	ctx := testContext(t)
	const group = "g"
	crashImage := func(src string) string { // what a kill -9 leaves on disk
		dst := filepath.Join(t.TempDir(), "img")
		require.NoError(t, exec.Command("cp", "-a", src, dst).Run())
		return dst
	}
	produce := func(cl *kgo.Client, n int) {
		for range n {
			require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: unsyncedTopic, Value: []byte("x")}).FirstErr())
		}
	}
	commit := func(adm *kadm.Client, at int64) {
		o := kadm.Offsets{}
		o.Add(kadm.Offset{Topic: unsyncedTopic, Partition: 0, At: at, LeaderEpoch: -1})
		resp, err := adm.CommitOffsets(ctx, group, o)
		require.NoError(t, err)
		require.NoError(t, resp.Error())
	}
	committed := func(adm *kadm.Client) int64 {
		resp, err := adm.FetchOffsets(ctx, group)
		require.NoError(t, err)
		o, _ := resp.Lookup(unsyncedTopic, 0)
		return o.At
	}

	dir := t.TempDir()
	b := startBroker(t, dir, nil)
	cl := newClient(t, b)
	produce(cl, 40)
	commit(kadm.NewClient(cl), 40)
	commit(kadm.NewClient(cl), 40)
	lost := crashImage(dir)
	cl.Close()
	b.Close()

	// Power loss: the unsynced topic loses its records, groups.log the end
	// of its last entry.
	require.NoError(t, os.Truncate(filepath.Join(lost, "partitions", unsyncedTopic+"-0", "0.dat"), 0))
	groups := filepath.Join(lost, "groups.log")
	info, err := os.Stat(groups)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(groups, info.Size()-20))

	b = startBroker(t, lost, nil)
	cl = newClient(t, b)
	produce(cl, 40) // offsets 0 to 39 again
	commit(kadm.NewClient(cl), 20)
	killed := crashImage(lost)
	cl.Close()
	b.Close()

	b = startBroker(t, killed, nil)
	cl = newClient(t, b)
	defer b.Close()
	defer cl.Close()
	assert.Equal(t, int64(20), committed(kadm.NewClient(cl)), "the newest commit survives a plain restart after a power loss")
}
