package processes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

func (w workflows) AllVersions(context.Context) ([]*domain.Workflow, error) {
	out := make([]*domain.Workflow, 0, len(w))
	for _, wf := range w {
		out = append(out, wf)
	}
	return out, nil
}

// awaitFlow waits for PaymentCaptured on shop.payments for the order's id.
func awaitFlow(t *testing.T) *domain.Workflow {
	t.Helper()
	wf, err := domain.ParseDefinition([]byte(`{"name":"pay","steps":[{"name":"captured","budget":"1h","await":{"topic":"shop.payments",
		"typeField":"/type","correlate":"/orderId","value":"{{ order.orderId }}","succeedOn":["PaymentCaptured"],"failOn":["PaymentDeclined"]}}]}`))
	require.NoError(t, err)
	wf.Version = 1
	return wf
}

// awaitRig is a store with schedulers and an awaiter on it.
type awaitRig struct {
	t       *testing.T
	store   processes.EventStore
	wf      *domain.Workflow
	awaiter *processes.Awaiter
	offset  int64
}

func newAwaitRig(t *testing.T, schedulers int) *awaitRig {
	store := embeddedStore(t)
	return newAwaitRigOn(t, store, store, schedulers, 2)
}

// newAwaitRigOn is newAwaitRig on a given store, with shards a scheduler.
func newAwaitRigOn(t *testing.T, store processes.EventStore, limits processes.StreamLimiter, schedulers, shards int) *awaitRig {
	wf := awaitFlow(t)
	inbox := &processes.AwaitInbox{Store: store, Limits: limits, Clock: processes.SystemClock}
	r := &awaitRig{t: t, store: store, wf: wf}
	var first *processes.Scheduler
	for i := range schedulers {
		s := &processes.Scheduler{Store: store, Commands: &agent{}, DeadLetters: dropLetters{}, Workflows: workflows{"pay": wf},
			Actor: fmt.Sprintf("scheduler/%d", i), Clock: processes.SystemClock, Logger: quiet(), Shards: shards, AwaitInbox: inbox}
		run(t, s.Run)
		<-s.Ready()
		if first == nil {
			first = s
		}
	}
	r.awaiter = &processes.Awaiter{Workflows: workflows{"pay": wf}, Inbox: inbox, Correlator: first, Clock: processes.SystemClock, Logger: quiet()}
	return r
}

func (r *awaitRig) submit(id, orderID string) {
	r.t.Helper()
	err := processes.NewTaskRepository(r.store).Create(context.Background(), id, domain.EventMetadata{Actor: "test"},
		domain.TaskSubmitted{TaskID: id, Workflow: "pay", WorkflowVersion: 1, Steps: r.wf.StepNames(),
			Order: json.RawMessage(`{"orderId":"` + orderID + `"}`), SubmittedAt: time.Now()})
	require.NoError(r.t, err)
}

func (r *awaitRig) publish(typ, orderID string) {
	r.t.Helper()
	r.offset++
	msg := inboundPayment(r.offset, orderID)
	msg.Value = []byte(`{"type":"` + typ + `","orderId":"` + orderID + `","amount":12}`)
	require.NoError(r.t, r.awaiter.HandleEvent(context.Background(), msg))
}

func (r *awaitRig) awaitEvent(id, eventType string) {
	r.t.Helper()
	require.Eventually(r.t, func() bool { return count(eventTypes(r.t, r.store, id), eventType) == 1 }, 10*time.Second, 10*time.Millisecond,
		"%s: %v", id, eventTypes(r.t, r.store, id))
}

func TestAwaitCompletedByAnEventAfterTheTaskWaits(t *testing.T) {
	r := newAwaitRig(t, 1)
	r.submit("o-1", "A-1")
	r.awaitEvent("o-1", domain.StepAwaitingType)
	r.publish("PaymentRefunded", "A-1") // a type no await wants
	r.publish("PaymentCaptured", "A-2") // another order's
	r.publish("PaymentCaptured", "A-1")
	r.awaitEvent("o-1", domain.TaskProcessedType)

	recorded, err := r.store.ReadStream(context.Background(), domain.TaskStream("o-1"))
	require.NoError(t, err)
	task := domain.NewTask("o-1")
	for i := range recorded {
		_, err := task.ApplyRecorded(&recorded[i])
		require.NoError(t, err)
	}
	assert.JSONEq(t, `{"type":"PaymentCaptured","orderId":"A-1","amount":12}`, string(task.Step("captured").Result))
	assert.Equal(t, processes.AwaiterStats{Kept: 2, Completed: 1, Ignored: 1}, r.awaiter.Stats())
}

func TestAwaitFindsTheEventThatCameFirst(t *testing.T) {
	r := newAwaitRig(t, 1)
	r.publish("PaymentCaptured", "B-1") // before the order was even submitted
	r.submit("o-2", "B-1")
	r.awaitEvent("o-2", domain.TaskProcessedType)
}

func TestAwaitDeclinedByAFailOnEvent(t *testing.T) {
	r := newAwaitRig(t, 1)
	r.submit("o-3", "C-1")
	r.awaitEvent("o-3", domain.StepAwaitingType)
	r.publish("PaymentDeclined", "C-1")
	r.awaitEvent("o-3", domain.TaskCompensatedType)
	assert.Equal(t, 1, count(eventTypes(t, r.store, "o-3"), domain.StepFailedType))
}

// TestAwaitCompletesTheStepOnceAmongSchedulers has two schedulers, and the
// event handed to both (two awaiters, say, during a rebalance), and the
// mark of the waiting task put twice: the step is completed once.
func TestAwaitCompletesTheStepOnceAmongSchedulers(t *testing.T) {
	r := newAwaitRig(t, 2)
	for i := range 5 {
		id, value := fmt.Sprintf("o-%d", i), fmt.Sprintf("D-%d", i)
		r.submit(id, value)
		r.awaitEvent(id, domain.StepAwaitingType)
		r.publish("PaymentCaptured", value)
		r.publish("PaymentCaptured", value)
		r.awaitEvent(id, domain.TaskProcessedType)
		assert.Equal(t, 1, count(eventTypes(t, r.store, id), domain.StepSucceededType), id)
	}
}

func TestAwaitInboxIsBounded(t *testing.T) {
	store := embeddedStore(t)
	inbox := &processes.AwaitInbox{Store: store, Limits: store, Clock: processes.SystemClock, Max: 4, Retention: time.Hour}
	var entries []processes.AwaitInboxEntry
	for i := range 10 {
		var err error
		entries, err = inbox.Put(context.Background(), "shop.payments", "V-1", processes.AwaitInboxEntry{Type: "T", Source: fmt.Sprint(i), At: time.Now()})
		require.NoError(t, err)
	}
	require.Len(t, entries, 4)
	assert.Equal(t, "9", entries[3].Source, "the newest last")
	recorded, err := store.ReadStream(context.Background(), processes.AwaitInboxStream("shop.payments", "V-1"))
	require.NoError(t, err)
	assert.LessOrEqual(t, len(recorded), 4, "the store keeps no more")

	old, err := inbox.Put(context.Background(), "shop.payments", "V-2", processes.AwaitInboxEntry{Type: "T", At: time.Now().Add(-2 * time.Hour)})
	require.NoError(t, err)
	assert.Empty(t, old, "an entry past the retention is not read")

	assert.NotEqual(t, processes.AwaitInboxStream("t", "a/b"), processes.AwaitInboxStream("t", "a/c"))
	assert.Equal(t, "saga-await-t-A-1", processes.AwaitInboxStream("t", "A-1"))
}

func inboundPayment(offset int64, orderID string) processes.Inbound {
	return processes.Inbound{Topic: "shop.payments", Offset: offset,
		Value: []byte(`{"type":"PaymentCaptured","orderId":"` + orderID + `","amount":12}`)}
}
