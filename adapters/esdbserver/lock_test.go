package esdbserver_test

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
)

// TestDataDirectoryLockIsReleasedByKill runs a server in a child process,
// checks that a second server on the same directory fails at once naming
// the directory and the holder, then kills the child with SIGKILL and checks
// that the directory can be opened again.
func TestDataDirectoryLockIsReleasedByKill(t *testing.T) {
	embeddedOnly(t)
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(stdout)
	require.True(t, lines.Scan())
	require.Equal(t, "ready", lines.Text())

	_, err = esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: dir})
	require.Error(t, err)
	assert.ErrorIs(t, err, eslog.ErrLocked)
	assert.Contains(t, err.Error(), dir)
	assert.Contains(t, err.Error(), "pid "+strconv.Itoa(cmd.Process.Pid))

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: dir})
	require.NoError(t, err, "kill -9 of the holder releases the lock")
	require.NoError(t, srv.Close())
}
