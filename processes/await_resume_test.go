package processes_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// inboxCountingStore counts the appends to and reads of await inboxes
// through it.
type inboxCountingStore struct {
	processes.EventStore
	appends, reads atomic.Int64
}

// Append counts an inbox append once the store has it: a test that waits
// for the count may then rely on the mark being there.
func (s *inboxCountingStore) Append(ctx context.Context, stream string, expected domain.ExpectedRevision, events ...domain.NewEvent) (uint64, error) {
	rev, err := s.EventStore.Append(ctx, stream, expected, events...)
	if err == nil && strings.HasPrefix(stream, "saga-await-") {
		s.appends.Add(1)
	}
	return rev, err
}

func (s *inboxCountingStore) ReadStream(ctx context.Context, stream string) ([]domain.RecordedEvent, error) {
	if strings.HasPrefix(stream, "saga-await-") {
		s.reads.Add(1)
	}
	return s.EventStore.ReadStream(ctx, stream)
}

// ownsAllBut owns every task but one.
type ownsAllBut string

func (o ownsAllBut) Owns(id string) bool { return id != string(o) }

// ownsOnly owns one task.
type ownsOnly string

func (o ownsOnly) Owns(id string) bool { return id == string(o) }

// TestAwaitResumePutsNoMarkAgain resumes schedulers with N tasks waiting
// on await steps, by a rebalance and by a start of another instance: no
// mark already in an inbox is appended again (a resume used to put every
// one again). A mark missing (its scheduler stopped between StepAwaiting
// and the mark) is put then, and an event kept while it was missing, one
// kept but not correlated, and one arriving during the resume all complete
// their tasks.
func TestAwaitResumePutsNoMarkAgain(t *testing.T) {
	const n = 20
	store := embeddedStore(t)
	wf := awaitFlow(t)
	scheduler := func(actor string, counted *inboxCountingStore, owns processes.Ownership) *processes.Scheduler {
		s := &processes.Scheduler{Store: store, Commands: &agent{}, DeadLetters: dropLetters{}, Workflows: workflows{"pay": wf},
			Actor: actor, Clock: processes.SystemClock, Logger: quiet(), Shards: 2, Ownership: owns}
		if counted != nil {
			s.AwaitInbox = &processes.AwaitInbox{Store: counted, Limits: store, Clock: processes.SystemClock}
		}
		run(t, s.Run)
		<-s.Ready()
		return s
	}
	r := &awaitRig{t: t, store: store, wf: wf}
	inA := &inboxCountingStore{EventStore: store}
	a := scheduler("scheduler/a", inA, ownsAllBut("o-miss"))
	// The awaiter's appends are not the schedulers': it has an inbox of
	// its own on the store.
	inbox := &processes.AwaitInbox{Store: store, Limits: store, Clock: processes.SystemClock}
	r.awaiter = &processes.Awaiter{Workflows: workflows{"pay": wf}, Inbox: inbox, Correlator: a, Clock: processes.SystemClock, Logger: quiet()}

	for i := range n {
		r.submit(fmt.Sprintf("w-%d", i), fmt.Sprintf("W-%d", i))
	}
	r.submit("o-early", "E-1")
	require.Eventually(t, func() bool { return inA.appends.Load() == n+1 }, 10*time.Second, 5*time.Millisecond, "a mark for each waiting task")
	// o-early's event was kept, and its awaiter stopped before it
	// correlated it.
	_, err := inbox.Put(context.Background(), "shop.payments", "E-1", processes.AwaitInboxEntry{Type: "PaymentCaptured",
		Body: []byte(`{"type":"PaymentCaptured","orderId":"E-1"}`), Source: "shop.payments/0/1", At: time.Now()})
	require.NoError(t, err)

	// o-miss waits with no mark: its scheduler puts none (as one stopped
	// right after StepAwaiting), and its event comes meanwhile.
	scheduler("scheduler/b", nil, ownsOnly("o-miss"))
	r.submit("o-miss", "M-1")
	r.awaitEvent("o-miss", domain.StepAwaitingType)
	r.publish("PaymentCaptured", "M-1")
	assert.Equal(t, 0, count(eventTypes(t, store, "o-miss"), domain.StepSucceededType), "no mark, so the event finds no task yet")

	a.Rebalanced(context.Background())

	// Another instance starts: it resumes every waiting task, while an
	// event arrives.
	inC := &inboxCountingStore{EventStore: store}
	c := &processes.Scheduler{Store: store, Commands: &agent{}, DeadLetters: dropLetters{}, Workflows: workflows{"pay": wf},
		Actor: "scheduler/c", Clock: processes.SystemClock, Logger: quiet(), Shards: 2,
		AwaitInbox: &processes.AwaitInbox{Store: inC, Limits: store, Clock: processes.SystemClock}}
	run(t, c.Run)
	r.publish("PaymentCaptured", "W-0")
	<-c.Ready()

	for _, id := range []string{"o-miss", "o-early", "w-0"} {
		r.awaitEvent(id, domain.TaskProcessedType)
	}
	require.Eventually(t, func() bool { return inC.reads.Load() >= n }, 10*time.Second, 5*time.Millisecond, "the resume reads the inboxes")
	assert.EqualValues(t, 1, inC.appends.Load(), "the resume put only the missing mark, o-miss's")
	assert.EqualValues(t, n+1, inA.appends.Load(), "the rebalance put no mark again")
	require.Eventually(t, func() bool { return c.Held()["awaits"] == n-1 }, 10*time.Second, 5*time.Millisecond,
		"the resume notes the marks it found: %v", c.Held())
	assert.Equal(t, n-1, a.Held()["awaits"], "the marks of finished tasks are forgotten")
}

// TestAwaitResumeRenewsAnAgingMark resumes a task whose mark was put more
// than half the inbox's retention ago: the resume puts it again, so that a
// wait longer than the retention is not forgotten by its inbox.
func TestAwaitResumeRenewsAnAgingMark(t *testing.T) {
	store := embeddedStore(t)
	wf := awaitFlow(t)
	scheduler := func(actor string, counted *inboxCountingStore, clock processes.Clock) *processes.Scheduler {
		s := &processes.Scheduler{Store: store, Commands: &agent{}, DeadLetters: dropLetters{}, Workflows: workflows{"pay": wf},
			Actor: actor, Clock: clock, Logger: quiet(), Shards: 2,
			AwaitInbox: &processes.AwaitInbox{Store: counted, Limits: store, Clock: clock, Retention: time.Hour}}
		run(t, s.Run)
		<-s.Ready()
		return s
	}
	r := &awaitRig{t: t, store: store, wf: wf}
	inA := &inboxCountingStore{EventStore: store}
	scheduler("scheduler/a", inA, processes.SystemClock)
	r.submit("o-long", "L-1")
	require.Eventually(t, func() bool { return inA.appends.Load() == 1 }, 10*time.Second, 5*time.Millisecond, "the mark")

	inB, inC := &inboxCountingStore{EventStore: store}, &inboxCountingStore{EventStore: store}
	b := scheduler("scheduler/b", inB, processes.ClockFunc(func() time.Time { return time.Now().Add(20 * time.Minute) }))
	c := scheduler("scheduler/c", inC, processes.ClockFunc(func() time.Time { return time.Now().Add(40 * time.Minute) }))
	require.Eventually(t, func() bool { return inC.appends.Load() == 1 }, 10*time.Second, 5*time.Millisecond,
		"40 minutes on, the mark is past half the retention: put again")
	require.Eventually(t, func() bool { return b.Held()["awaits"] == 1 && c.Held()["awaits"] == 1 }, 10*time.Second, 5*time.Millisecond)
	assert.Zero(t, inB.appends.Load(), "20 minutes on, the mark is fresh")
}
