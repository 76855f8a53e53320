// Package agenttest holds what the tests of the agent runtime, and of the
// scheduler handing commands to it, share: a log of replies and a service
// whose answers the test decides.
package agenttest

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sagaengine/saga/domain/protocol"
)

// ReplyLog keeps the replies an agent sends, by task: a port.ReplySender.
type ReplyLog struct {
	mu      sync.Mutex
	Replies map[string]protocol.StepReply
	arrived chan string
}

// NewReplyLog returns an empty log.
func NewReplyLog() *ReplyLog {
	return &ReplyLog{Replies: map[string]protocol.StepReply{}, arrived: make(chan string, 1000)}
}

// SendReply keeps r.
func (l *ReplyLog) SendReply(_ context.Context, r protocol.StepReply) error {
	l.mu.Lock()
	l.Replies[r.TaskID] = r
	l.mu.Unlock()
	l.arrived <- r.TaskID
	return nil
}

// Reply returns the reply of a task, if one came.
func (l *ReplyLog) Reply(task string) (protocol.StepReply, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.Replies[task]
	return r, ok
}

// Await waits for the reply of a task.
func (l *ReplyLog) Await(t *testing.T, task string) protocol.StepReply {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		r, ok := l.Replies[task]
		l.mu.Unlock()
		if ok {
			return r
		}
		select {
		case <-l.arrived:
		case <-deadline:
			t.Fatalf("no reply for %s", task)
		}
	}
}

// Scripted is a service whose answer to each task the test decides: by
// default it succeeds at once; a task in hang waits until released.
type Scripted struct {
	mu       sync.Mutex
	fail     map[string]error
	hang     map[string]chan struct{}
	Started  chan string
	Calls    atomic.Int64
	now, Top atomic.Int64 // calls at once, and the most seen
}

// NewScripted returns a service that succeeds at once for every task.
func NewScripted() *Scripted {
	return &Scripted{fail: map[string]error{}, hang: map[string]chan struct{}{}, Started: make(chan string, 1000)}
}

// Hold makes the call of task wait until the returned channel closes.
func (s *Scripted) Hold(task string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	s.hang[task] = ch
	return ch
}

// FailWith makes the calls of task fail with err.
func (s *Scripted) FailWith(task string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[task] = err
}

// Handle is the service's StepHandler.
func (s *Scripted) Handle(ctx context.Context, cmd protocol.ExecuteStep) (json.RawMessage, error) {
	s.Calls.Add(1)
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for {
		top := s.Top.Load()
		if n <= top || s.Top.CompareAndSwap(top, n) {
			break
		}
	}
	s.Started <- cmd.TaskID
	s.mu.Lock()
	hang, err := s.hang[cmd.TaskID], s.fail[cmd.TaskID]
	s.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	return json.RawMessage(`{}`), nil
}

// AwaitStart waits for a call to start and returns its task.
func (s *Scripted) AwaitStart(t *testing.T) string {
	t.Helper()
	select {
	case task := <-s.Started:
		return task
	case <-time.After(10 * time.Second):
		t.Fatal("no call started")
		return ""
	}
}

// AwaitStartOf waits for the call of task, passing over others.
func (s *Scripted) AwaitStartOf(t *testing.T, task string) {
	t.Helper()
	for s.AwaitStart(t) != task {
	}
}
