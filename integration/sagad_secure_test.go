package integration_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/secure"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// buildSagad builds sagad into the test's temporary directory.
func buildSagad(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sagad")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/sagad").CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

// runSagad starts sagad with args and returns its HTTP address once it
// is ready, and everything it writes to stderr so far, collected until
// stop is called.
func runSagad(t *testing.T, bin string, args ...string) (httpAddr string, output func() string, stop func()) {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SAGA_READY_FILE="+ready)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logs := &lockedBuffer{}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() {
		defer close(done)
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			_, _ = logs.Write([]byte(lines.Text() + "\n"))
		}
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		<-done
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil && len(b) > 0 {
			httpAddr = string(b)
			break
		}
		require.True(t, time.Now().Before(deadline), "sagad did not start: %s", logs.String())
		time.Sleep(50 * time.Millisecond)
	}
	// The instructions follow the ready file by a moment.
	for !strings.Contains(logs.String(), "esdb://") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return httpAddr, logs.String, stop
}

// TestSagadSecure starts sagad --secure as a user would, runs the kcat
// command it prints (as a producer) to submit an order that reaches
// Processed, reads the task stream with the official EventStoreDB client
// through the connection string it prints, and checks that its output
// names the password files but holds no password. A restart reuses the
// generated files.
func TestSagadSecure(t *testing.T) {
	requireTools(t, "kcat", "bash")
	bin := buildSagad(t)
	data := t.TempDir()
	args := []string{"--secure", "--data", data, "--kafka-listen", "127.0.0.1:0", "--eventstore-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}
	httpAddr, output, stop := runSagad(t, bin, args...)
	files, err := secure.Prepare(filepath.Join(data, "secure"))
	require.NoError(t, err)
	kafkaPass, err := files.KafkaPassword()
	require.NoError(t, err)
	esPass, err := files.EventStorePassword()
	require.NoError(t, err)

	out := output()
	for _, f := range []string{files.KafkaPasswordFile, files.EventStorePasswordFile, files.CA} {
		assert.Contains(t, out, f, "the output says where the secrets are")
	}
	for _, p := range []string{filepath.Join(data, "secure", secure.KafkaPasswordFile), files.EventStorePasswordFile, files.Key} {
		info, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), p)
	}

	// The printed kcat command, turned from listing into producing.
	kcatCmd := regexp.MustCompile(`(?s)kcat -b .*? -L`).FindString(out)
	require.NotEmpty(t, kcatCmd, out)
	kcatCmd = strings.ReplaceAll(strings.TrimSuffix(kcatCmd, " -L"), "\\\n", " ") + " -P -t " + protocol.OrdersTopic + " -K:"
	produce := exec.Command("bash", "-c", kcatCmd)
	produce.Stdin = strings.NewReader(`sagad-1:{"orderId":"sagad-1"}` + "\n")
	kout, err := produce.CombinedOutput()
	require.NoError(t, err, "%s\n%s", kcatCmd, kout)
	state := ""
	for deadline := time.Now().Add(30 * time.Second); state != string(domain.StateProcessed) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		resp, err := http.Get("http://" + httpAddr + "/api/tasks/sagad-1")
		if err != nil {
			continue
		}
		var task struct{ State string }
		_ = json.NewDecoder(resp.Body).Decode(&task)
		resp.Body.Close()
		state = task.State
	}
	require.Equal(t, string(domain.StateProcessed), state, "the order kcat produced")

	// The printed connection string, with the password read by the shell.
	esLine := regexp.MustCompile(`esdb://[^\s"]*\$\(cat [^)]*\)\S*`).FindString(out)
	require.NotEmpty(t, esLine, out)
	conn, err := exec.Command("bash", "-c", "echo "+shellQuoteExceptSubst(esLine)).Output()
	require.NoError(t, err)
	events, err := esRead(t, strings.TrimSpace(string(conn)), domain.TaskStream("sagad-1"))
	require.NoError(t, err)
	assert.Contains(t, events, domain.TaskProcessedType)

	stop()
	out = output()
	assert.NotContains(t, out, kafkaPass)
	assert.NotContains(t, out, esPass)

	// A restart reuses the CA and the credentials.
	ca, err := os.ReadFile(files.CA)
	require.NoError(t, err)
	_, output2, stop2 := runSagad(t, bin, args...)
	stop2()
	again, err := os.ReadFile(files.CA)
	require.NoError(t, err)
	assert.Equal(t, ca, again)
	kafkaPass2, err := files.KafkaPassword()
	require.NoError(t, err)
	assert.Equal(t, kafkaPass, kafkaPass2)
	assert.NotContains(t, output2(), esPass)
}

// shellQuoteExceptSubst quotes a printed connection string for bash,
// leaving its $(cat FILE) to the shell.
func shellQuoteExceptSubst(s string) string {
	i, j := strings.Index(s, "$("), strings.Index(s, ")")
	if i < 0 || j < i {
		return "'" + s + "'"
	}
	return "'" + s[:i] + "'\"" + s[i:j+1] + "\"'" + s[j+1:] + "'"
}
