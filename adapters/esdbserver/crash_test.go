package esdbserver_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
)

const crashChildEnv = "SAGA_ESDB_CRASH_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

// crashChild serves the store in dir and appends from many goroutines
// through the official client, printing one line per acknowledged append,
// until it is killed.
func crashChild(dir string) {
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: dir, SegmentSize: 256 << 10})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	conf, _ := esdb.ParseConnectionString(fmt.Sprintf("esdb://%s?tls=false", srv.Addr()))
	conf.Logger = esdb.NoopLogging()
	client, _ := esdb.NewClient(conf)
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	fmt.Println("ready")
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			name := fmt.Sprintf("crash-%d-%s", w, uuid.NewString()[:8])
			for rev := uint64(0); ; rev++ {
				id := uuid.New()
				expected := esdb.ExpectedRevision(esdb.Revision(rev - 1))
				if rev == 0 {
					expected = esdb.NoStream{}
				}
				res, err := client.AppendToStream(context.Background(), name, esdb.AppendToStreamOptions{ExpectedRevision: expected},
					esdb.EventData{EventID: id, EventType: "Crashed", ContentType: esdb.ContentTypeJson, Data: []byte(fmt.Sprintf(`{"rev":%d}`, rev))})
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Fprintf(out, "ack %s %d %d %s\n", name, res.NextExpectedVersion, res.CommitPosition, id)
				_ = out.Flush()
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
}

type ack struct {
	stream string
	rev    uint64
	pos    uint64
	id     uuid.UUID
}

// TestCrashKeepsEveryAcknowledgedAppend kills a writing server with SIGKILL
// at random moments and checks, after each restart, that every acknowledged
// append is readable at its revision and position.
func TestCrashKeepsEveryAcknowledgedAppend(t *testing.T) {
	embeddedOnly(t)
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("SAGA_CRASH_ROUNDS")); err == nil {
		rounds = v
	}
	if testing.Short() {
		rounds = 1
	}
	dir := t.TempDir()
	var acks []ack
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		lines := bufio.NewScanner(stdout)
		require.True(t, lines.Scan())
		require.Equal(t, "ready", lines.Text())
		// Kill after a random number of acknowledgements, so that writes are
		// in flight at the moment of death.
		killAfter := 200 + rand.IntN(1500)
		n := 0
		for lines.Scan() {
			f := strings.Fields(lines.Text())
			if len(f) != 5 {
				continue // a line cut by the kill
			}
			rev, _ := strconv.ParseUint(f[2], 10, 64)
			pos, _ := strconv.ParseUint(f[3], 10, 64)
			acks = append(acks, ack{stream: f[1], rev: rev, pos: pos, id: uuid.MustParse(f[4])})
			if n++; n == killAfter {
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			}
		}
		_ = cmd.Wait()
		t.Logf("round %d: killed after %d acknowledged appends", round, n)

		srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: dir, SegmentSize: 256 << 10})
		require.NoError(t, err, "the store reopens after kill -9")
		client := connect(t, fmt.Sprintf("esdb://%s?tls=false", srv.Addr()))
		verifyAcks(t, client, acks)
		require.NoError(t, client.Close())
		require.NoError(t, srv.Close())
	}
}

func verifyAcks(t *testing.T, client *esdb.Client, acks []ack) {
	t.Helper()
	byStream := map[string][]ack{}
	for _, a := range acks {
		byStream[a.stream] = append(byStream[a.stream], a)
	}
	for name, want := range byStream {
		got, err := readStream(t, client, name, esdb.ReadStreamOptions{}, 1<<20)
		require.NoError(t, err, name)
		require.GreaterOrEqual(t, len(got), len(want), "acknowledged events of %s are missing", name)
		for i, e := range got {
			assert.Equal(t, uint64(i), e.Event.EventNumber, "revisions of %s are contiguous", name)
		}
		for _, a := range want {
			e := got[a.rev]
			assert.Equal(t, a.id, e.Event.EventID, "%s@%d", name, a.rev)
			assert.Equal(t, a.pos, e.Event.Position.Commit, "%s@%d keeps its position", name, a.rev)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}
