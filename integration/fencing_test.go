package integration_test

import (
	"encoding/json"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// timeoutTerms returns the lease term and detector of every StepTimedOut
// of a task's stream.
func timeoutTerms(t *testing.T, events []domain.RecordedEvent) (terms []int64, by []string) {
	t.Helper()
	for i := range events {
		e, err := events[i].Decode()
		require.NoError(t, err)
		if to, ok := e.(domain.StepTimedOut); ok {
			terms, by = append(terms, to.LeaseTerm), append(by, to.DetectedBy)
		}
	}
	return terms, by
}

// TestSupervisorTimeoutsCarryGrowingLeaseTerms runs the whole system with a
// hung service: every StepTimedOut carries the lease term of the
// supervisor that appended it, recorded in the lease terms stream under
// its actor and shown by the API as the task's leaseTerm, and after a restart of every process (the broker's consumer
// group included) the supervisor acts in a newer term.
func TestSupervisorTimeoutsCarryGrowingLeaseTerms(t *testing.T) {
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{fastWorkflow(300 * time.Millisecond)},
		Faults: faults("shipping", demo.Fault{Mode: demo.FaultHang, Rate: 1})})
	order := func(id string) (int64, string) {
		s.publish(id, []byte(`{"orderId":"`+id+`"}`))
		require.Equal(t, domain.StateCompensated, s.awaitTerminal([]string{id}, 30*time.Second)[id].State)
		terms, by := timeoutTerms(t, s.stream(id))
		require.Len(t, terms, 3, "three attempts timed out")
		for i := range terms {
			assert.Equal(t, terms[0], terms[i], "one leader throughout")
			assert.Equal(t, by[0], by[i])
		}
		s.awaitView(id, domain.StateCompensated)
		view, ok, err := s.app.Tasks.Get(ctx(t, 10*time.Second), id)
		require.NoError(t, err)
		require.True(t, ok)
		assert.Equal(t, terms[0], view.LeaseTerm, "the API shows the task's newest term")
		return terms[0], by[0]
	}
	before, beforeBy := order("fence-1")
	assert.Positive(t, before)
	s.restart()
	after, afterBy := order("fence-2")
	assert.Greater(t, after, before, "a newer term after the restart")

	recorded, err := s.app.Store.ReadStream(ctx(t, 10*time.Second), processes.LeaseTermsStream)
	require.NoError(t, err)
	began := map[int64]processes.LeaseTermBegan{}
	for i, r := range recorded {
		require.Equal(t, processes.LeaseTermBeganType, r.Type)
		var b processes.LeaseTermBegan
		require.NoError(t, json.Unmarshal(r.Data, &b))
		assert.EqualValues(t, i+1, b.Term, "terms are numbered 1, 2, ... in the stream")
		began[b.Term] = b
	}
	assert.Equal(t, beforeBy, began[before].Actor, "the term was begun by the supervisor that acted in it")
	assert.Equal(t, afterBy, began[after].Actor)
	assert.Equal(t, after, s.app.Supervisor.Stats().LeaseTerm)
}

// cuttableProxy forwards TCP connections to target until cut: then it
// closes every connection and refuses new ones, as a firewall rule
// between one process and the event store would.
type cuttableProxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
}

func newCuttableProxy(t *testing.T, target string) *cuttableProxy {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cuttableProxy{lis: lis, target: target}
	go p.serve()
	t.Cleanup(p.Cut)
	return p
}

func (p *cuttableProxy) serve() {
	for {
		in, err := p.lis.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		p.mu.Lock()
		if err != nil || p.cut {
			p.mu.Unlock()
			in.Close()
			if out != nil {
				out.Close()
			}
			continue
		}
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(out, in); out.Close() }()
		go func() { _, _ = io.Copy(in, out); in.Close() }()
	}
}

// Cut closes every connection and the listener.
func (p *cuttableProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.lis.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// TestASupervisorCutOffFromTheStoreHandsTheLeaseOver reproduces the first
// lease defect of issue 28: the leading supervisor reaches the event store
// through a proxy that is then cut. It stands down after its store timeout,
// and the standby, which reaches the store, takes the lease and times out
// the attempts of a hung service in a newer term, so the task finishes.
// With a store timeout longer than the test (the old behaviour: no timeout)
// the cut-off leader keeps the lease and nothing times out.
func TestASupervisorCutOffFromTheStoreHandsTheLeaseOver(t *testing.T) {
	wf := fastWorkflow(300 * time.Millisecond)
	var roles []engine.Role
	for _, r := range engine.AllRoles {
		if r != engine.RoleSupervisor {
			roles = append(roles, r)
		}
	}
	s := startSystem(t, engine.Config{Roles: roles, Workflows: []*domain.Workflow{wf},
		Faults: faults("shipping", demo.Fault{Mode: demo.FaultHang, Rate: 1})})
	u, err := url.Parse(s.app.EventStoreURL)
	require.NoError(t, err)
	proxy := newCuttableProxy(t, u.Host)
	supervisor := func(instance, storeURL string) *engine.App {
		a, err := engine.Start(engine.Config{Instance: instance, Roles: []engine.Role{engine.RoleSupervisor},
			KafkaBrokers: s.app.KafkaBrokers, EventStoreURL: storeURL, Workflows: []*domain.Workflow{wf}, Logger: testLogger(),
			SupervisorInterval: 50 * time.Millisecond, SupervisorStoreTimeout: time.Second})
		require.NoError(t, err)
		t.Cleanup(a.Close)
		<-a.Supervisor.Ready()
		return a
	}
	viaProxy := *u
	viaProxy.Host = proxy.lis.Addr().String()
	cutOff := supervisor("cut-off", viaProxy.String())
	require.Eventually(t, func() bool { return cutOff.Supervisor.Stats().LeaseTerm > 0 }, 30*time.Second, 10*time.Millisecond, "the first supervisor leads")
	standby := supervisor("standby", s.app.EventStoreURL)
	oldTerm := cutOff.Supervisor.Stats().LeaseTerm
	assert.Zero(t, standby.Supervisor.Stats().LeaseTerm, "one leader")

	proxy.Cut()
	began := time.Now()
	s.publish("cut-1", []byte(`{"orderId":"cut-1"}`))
	task := s.awaitTerminal([]string{"cut-1"}, 30*time.Second)["cut-1"]
	require.Equal(t, domain.StateCompensated, task.State, task.Reason)
	terms, by := timeoutTerms(t, s.stream("cut-1"))
	require.Len(t, terms, 3)
	for i := range terms {
		assert.Equal(t, "supervisor/standby", by[i], "the standby timed the attempts out")
		assert.Greater(t, terms[i], oldTerm, "in a newer term")
	}
	assert.EqualValues(t, 1, cutOff.Supervisor.Stats().StandDowns, "the cut-off leader stood down")
	t.Logf("finished %s after the cut; terms %v (cut-off leader's %d)", time.Since(began).Round(time.Millisecond), terms, oldTerm)
}
