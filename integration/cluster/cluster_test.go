package cluster_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/domain"
)

// brokerRoles are the roles of the process that runs the embedded Kafka
// broker. Any sagad without --kafka-brokers starts one; until sagad has a
// broker-only role, the broker node also serves the api role. Change it
// here (e.g. to "broker") when that role exists.
var brokerRoles = envOr("SAGA_CLUSTER_BROKER_ROLES", "api")

// node is one process of the topology. The event store is the node named
// storeNode; the node with broker set runs the embedded Kafka broker; every
// other node is a sagad with --roles roles against both.
type node struct {
	name   string
	roles  string
	broker bool
}

// storeNode names the standalone event store ('sagad eventstore').
const storeNode = "store"

// topology is the split topology of docs/operations.md, with two of each
// role that may run twice.
var topology = []node{
	{name: storeNode},
	{name: "broker", roles: brokerRoles, broker: true},
	{name: "scheduler-1", roles: "scheduler,supervisor"},
	{name: "scheduler-2", roles: "scheduler,supervisor"},
	{name: "agents-1", roles: "agents"},
	{name: "agents-2", roles: "agents"},
	{name: "submitter", roles: "submitter"},
	{name: "status", roles: "status"},
	{name: "api", roles: "api"},
}

// firstUID is the uid of the first node when the suite runs as root; node i
// runs as firstUID+i, so that a firewall rule can single it out.
const firstUID = 47100

// budget is each step's and compensation's budget in the suite's workflow:
// short, so that attempts that hang time out within the phases.
const budget = 2 * time.Second

// cluster is the running topology.
type cluster struct {
	t       *testing.T
	dir     string
	bin     string
	asRoot  bool
	storeAt string // the event store's address
	kafkaAt string // the broker's address
	apiAt   string // the api node's HTTP address
	procs   map[string]*proc
	order   []string

	services map[string]*demo.Service
}

// proc is one node's process, restarted in place after a kill.
type proc struct {
	c       *cluster
	node    node
	uid     int
	dataDir string
	args    []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	// leader is what the newest "supervisor lease changed" line of this
	// process said, and leaderAt when it said it.
	leader   bool
	leaderAt time.Time
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func freeAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	return lis.Addr().String()
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// buildSagad builds sagad into dir, once per test binary.
func buildSagad(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "sagad")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/sagaengine/saga/cmd/sagad")
	cmd.Stderr = os.Stderr
	started := time.Now()
	require.NoError(t, cmd.Run(), "build sagad")
	t.Logf("built sagad in %v", time.Since(started).Round(time.Millisecond))
	require.NoError(t, os.Chmod(bin, 0o755))
	return bin
}

// startCluster starts the topology: the event store, then the broker, then
// every other node at once, each with its own data directory. As root each
// node runs as its own uid (setpriv), else as the test's user.
func startCluster(t *testing.T, services map[string]*demo.Service, asRoot bool) *cluster {
	t.Helper()
	// Not t.TempDir: its parent is 0700 root's, which other uids cannot
	// enter.
	dir, err := os.MkdirTemp("", "saga-cluster-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept the nodes' data and logs in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	c := &cluster{t: t, dir: dir, asRoot: asRoot, procs: map[string]*proc{}, services: services,
		storeAt: freeAddr(t), kafkaAt: freeAddr(t)}
	c.bin = buildSagad(t, dir)

	wf, err := demo.Workflow().WithBudget(budget, domain.Backoff{Initial: 50 * time.Millisecond, Multiplier: 2, Max: 400 * time.Millisecond, Jitter: 0.2}).MarshalDefinition()
	require.NoError(t, err)
	workflows := filepath.Join(dir, "workflows")
	require.NoError(t, os.MkdirAll(workflows, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(workflows, "order.json"), wf, 0o644))

	common := []string{"--eventstore", "esdb://" + c.storeAt + "?tls=false",
		"--workflows", workflows, "--supervisor-interval", "100ms", "--checkpoint-every", "500ms"}
	for agent, svc := range services {
		common = append(common, "--demo-service", agent+"="+svc.URL())
	}
	for i, n := range topology {
		p := &proc{c: c, node: n, uid: firstUID + i, dataDir: filepath.Join(dir, n.name), logPath: filepath.Join(dir, n.name+".log")}
		require.NoError(t, os.MkdirAll(p.dataDir, 0o700))
		if asRoot {
			require.NoError(t, os.Chown(p.dataDir, p.uid, p.uid))
		}
		switch {
		case n.name == storeNode:
			p.args = []string{"eventstore", "--listen", c.storeAt, "--data", p.dataDir}
		case n.broker:
			// Without --kafka-brokers: this one runs the embedded broker.
			p.args = append(append([]string{"--roles", n.roles, "--kafka-listen", c.kafkaAt}, common...),
				"--data", p.dataDir, "--http-listen", freeAddr(t), "--instance", n.name)
		default:
			p.args = append(append([]string{"--roles", n.roles, "--kafka-brokers", c.kafkaAt}, common...), "--data", p.dataDir, "--instance", n.name)
			listen := freeAddr(t)
			if n.name == "api" {
				c.apiAt = listen
			}
			p.args = append(p.args, "--http-listen", listen)
		}
		c.procs[n.name] = p
		c.order = append(c.order, n.name)
	}
	t.Cleanup(c.stopAll)

	c.procs[storeNode].start()
	c.awaitListening(c.storeAt)
	c.procs["broker"].start()
	c.procs["broker"].awaitReady()
	var rest []*proc
	for _, name := range c.order[2:] {
		p := c.procs[name]
		p.start()
		rest = append(rest, p)
	}
	for _, p := range rest {
		p.awaitReady()
	}
	return c
}

func (c *cluster) awaitListening(addr string) {
	require.Eventually(c.t, func() bool {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "nothing listens on %s", addr)
}

// readyFile is where sagad writes its HTTP address once started.
func (p *proc) readyFile() string { return filepath.Join(p.dataDir, "ready") }

// start starts the node's process, logging to its log file, which the
// test also scans for lease changes.
func (p *proc) start() {
	t := p.c.t
	_ = os.Remove(p.readyFile())
	var cmd *exec.Cmd
	if p.c.asRoot {
		cmd = exec.Command("setpriv", append([]string{"--reuid=" + strconv.Itoa(p.uid), "--regid=" + strconv.Itoa(p.uid), "--clear-groups", "--", p.c.bin}, p.args...)...)
	} else {
		cmd = exec.Command(p.c.bin, p.args...)
	}
	cmd.Env = append(os.Environ(), "SAGA_READY_FILE="+p.readyFile(), "HOME="+p.dataDir)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "start %s", p.node.name)
	done := make(chan struct{})
	go func() {
		p.scan(io.TeeReader(stderr, log))
		_ = cmd.Wait()
		log.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done, p.leader = cmd, done, false
	p.mu.Unlock()
}

// scan follows the process's log for the lease's changes.
func (p *proc) scan(r io.Reader) {
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if strings.Contains(line, "supervisor lease changed") {
			p.mu.Lock()
			p.leader, p.leaderAt = strings.Contains(line, "leader=true"), time.Now()
			p.mu.Unlock()
		}
		if strings.Contains(line, "supervisor lease") || strings.Contains(line, "level=ERROR") {
			p.c.t.Logf("%s: %s", p.node.name, line)
		}
	}
}

func (p *proc) awaitReady() {
	if p.node.name == storeNode {
		p.c.awaitListening(p.c.storeAt)
		return
	}
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(p.readyFile()); err == nil {
			return
		}
		select {
		case <-done:
			p.c.t.Fatalf("%s exited while starting; see %s:\n%s", p.node.name, p.logPath, tail(p.logPath, 20))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.c.t.Fatalf("%s did not start within a minute; see %s:\n%s", p.node.name, p.logPath, tail(p.logPath, 20))
		}
	}
}

// signal sends sig to the node's process.
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil {
		p.c.t.Errorf("signal %s: %v", p.node.name, err)
	}
}

// kill kills the process with SIGKILL and waits for it to end.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.leader = false
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	<-done
}

// restart starts the process again after kill and waits until it is up.
func (p *proc) restart() {
	p.start()
	p.awaitReady()
}

// exited reports whether the process ended by itself.
func (p *proc) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (c *cluster) stopAll() {
	for i := len(c.order) - 1; i >= 0; i-- {
		p := c.procs[c.order[i]]
		p.mu.Lock()
		cmd, done := p.cmd, p.done
		p.mu.Unlock()
		if cmd == nil {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-done
	}
}

// leader is the supervisor that last said it took the lease and has not
// said since that it lost it, or nil.
func (c *cluster) leader() *proc {
	var found *proc
	for _, name := range c.order {
		p := c.procs[name]
		p.mu.Lock()
		if p.leader && (found == nil || p.leaderAt.After(found.leaderAt)) {
			found = p
		}
		p.mu.Unlock()
	}
	return found
}

// awaitLeader waits until a supervisor holds the lease.
func (c *cluster) awaitLeader() *proc {
	var l *proc
	require.Eventually(c.t, func() bool { l = c.leader(); return l != nil }, 30*time.Second, 50*time.Millisecond, "no supervisor took the lease")
	return l
}

// tail returns the first lines of a panic in a log file, or its last n
// lines.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") {
			return strings.Join(lines[max(0, i-2):min(len(lines), i+n)], "\n")
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// runningAsRoot reports whether partitions can be made: root, with
// iptables and setpriv installed. The reason says what is missing.
func runningAsRoot() (bool, string) {
	u, err := user.Current()
	if err != nil || u.Uid != "0" {
		return false, "not root: the nodes run as the test's user and partitions are skipped"
	}
	for _, tool := range []string{"iptables", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			return false, fmt.Sprintf("no %s: partitions are skipped", tool)
		}
	}
	return true, ""
}
