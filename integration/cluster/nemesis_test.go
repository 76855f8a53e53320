package cluster_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// commentPrefix starts the comment of every firewall rule the suite makes;
// the test's pid follows, so that leftovers of a test that died can be
// found (iptables -S OUTPUT | grep saga-cluster-) and deleted.
const commentPrefix = "saga-cluster-"

// firewall makes per-uid partitions on loopback with iptables and removes
// them: each heal function, and the test's cleanup for whatever is left.
type firewall struct {
	t       *testing.T
	comment string
	mu      sync.Mutex
	rules   map[string][]string
}

func newFirewall(t *testing.T) *firewall {
	f := &firewall{t: t, comment: commentPrefix + strconv.Itoa(os.Getpid()), rules: map[string][]string{}}
	removeLeftoverRules(t)
	t.Cleanup(f.removeAll)
	return f
}

func iptables(args ...string) error {
	out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// cut drops every packet the processes of uid send to the loopback port;
// heal removes the rule. Dropped rather than refused: the process sees a
// silent network, as across a real partition, not a refused connection.
func (f *firewall) cut(uid int, port string) (heal func()) {
	spec := []string{"OUTPUT", "-o", "lo", "-p", "tcp", "--dport", port, "-m", "owner", "--uid-owner", strconv.Itoa(uid),
		"-m", "comment", "--comment", f.comment, "-j", "DROP"}
	key := strings.Join(spec, " ")
	require.NoError(f.t, iptables(append([]string{"-A"}, spec...)...))
	f.mu.Lock()
	f.rules[key] = spec
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.rules, key)
			f.mu.Unlock()
			if err := iptables(append([]string{"-D"}, spec...)...); err != nil {
				f.t.Errorf("heal: %v", err)
			}
		})
	}
}

func (f *firewall) removeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, spec := range f.rules {
		if err := iptables(append([]string{"-D"}, spec...)...); err != nil {
			f.t.Errorf("remove rule: %v", err)
		}
		delete(f.rules, key)
	}
}

// removeLeftoverRules deletes the rules of earlier runs whose process is
// gone (killed before its cleanup ran).
func removeLeftoverRules(t *testing.T) {
	out, err := exec.Command("iptables", "-w", "-S", "OUTPUT").Output()
	require.NoError(t, err, "iptables -S OUTPUT")
	for _, line := range strings.Split(string(out), "\n") {
		i := strings.Index(line, commentPrefix)
		if i < 0 || !strings.HasPrefix(line, "-A ") {
			continue
		}
		pid, _ := strconv.Atoi(strings.Trim(strings.Fields(line[i+len(commentPrefix):])[0], `"`))
		if pid > 0 && syscall.Kill(pid, 0) == nil {
			continue // a run still going
		}
		args := strings.Fields(line)
		args[0] = "-D"
		for k := range args {
			args[k] = strings.Trim(args[k], `"`)
		}
		if err := iptables(args...); err != nil {
			t.Logf("leftover rule %q: %v", line, err)
		} else {
			t.Logf("removed a leftover rule: %s", line)
		}
	}
}

// phase is one fault the nemesis injected, for the report and the checks.
type phase struct {
	name, target string
	from, to     time.Time
}

// nemesis injects faults into a cluster.
type nemesis struct {
	c   *cluster
	fw  *firewall // nil when partitions cannot be made
	rnd *rand.Rand

	mu     sync.Mutex
	phases []phase
	busy   map[string]bool // nodes a fault holds (the long run's)
}

func (n *nemesis) record(name, target string, from time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.phases = append(n.phases, phase{name: name, target: target, from: from, to: time.Now()})
	n.c.t.Logf("nemesis: %s %s for %v", name, target, time.Since(from).Round(time.Millisecond))
}

// pick chooses one of the nodes not excluded, or nil.
func (n *nemesis) pick(exclude ...string) *proc {
	var names []string
	for _, name := range n.c.order {
		if !contains(exclude, name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return n.c.procs[names[n.rnd.IntN(len(names))]]
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// kill kills p with SIGKILL, leaves it dead for down, and starts it again.
func (n *nemesis) kill(p *proc, down time.Duration) {
	from := time.Now()
	p.kill()
	time.Sleep(down)
	p.restart()
	n.record("kill -9", p.node.name, from)
}

// pause stops p with SIGSTOP for d, then continues it.
func (n *nemesis) pause(p *proc, d time.Duration) {
	from := time.Now()
	p.signal(syscall.SIGSTOP)
	time.Sleep(d)
	p.signal(syscall.SIGCONT)
	n.record("SIGSTOP", p.node.name, from)
}

// partition cuts p off from the event store or the broker (to is storeNode
// or "broker") for d.
func (n *nemesis) partition(name string, p *proc, to string, d time.Duration) {
	addr := n.c.storeAt
	if to != storeNode {
		addr = n.c.kafkaAt
	}
	from := time.Now()
	heal := n.fw.cut(p.uid, port(addr))
	time.Sleep(d)
	heal()
	n.record(name, p.node.name, from)
}

// choose picks a kind of fault and a node for it that no other fault
// holds, and claims the node; target is nil when the kind's node is taken.
func (n *nemesis) choose() (kind string, target *proc) {
	kinds := []string{"kill", "pause"}
	if n.fw != nil {
		kinds = append(kinds, "partition-store", "partition-broker", "leader-store", "leader-broker")
	}
	kind = kinds[n.rnd.IntN(len(kinds))]
	n.mu.Lock()
	defer n.mu.Unlock()
	switch kind {
	case "kill", "pause":
		target = n.pick(n.busyNames()...)
	case "partition-store":
		target = n.pick(append(n.busyNames(), storeNode)...)
	case "partition-broker":
		target = n.pick(append(n.busyNames(), storeNode, "broker")...)
	default:
		target = n.c.leader()
	}
	if target == nil || n.busy[target.node.name] {
		return kind, nil
	}
	n.busy[target.node.name] = true
	return kind, target
}

func (n *nemesis) busyNames() []string {
	var names []string
	for name := range n.busy {
		names = append(names, name)
	}
	return names
}

// inject injects the fault kind into target for d, then releases target.
func (n *nemesis) inject(kind string, target *proc, d time.Duration) {
	defer func() {
		n.mu.Lock()
		delete(n.busy, target.node.name)
		n.mu.Unlock()
	}()
	switch kind {
	case "kill":
		n.kill(target, d/4)
	case "pause":
		n.pause(target, d)
	case "partition-store":
		n.partition("partition from the store", target, storeNode, d)
	case "partition-broker":
		n.partition("partition from the broker", target, "broker", d)
	case "leader-store":
		n.partition("leader cut off from the store", target, storeNode, d)
	case "leader-broker":
		n.partition("leader cut off from the broker", target, "broker", d)
	}
}
