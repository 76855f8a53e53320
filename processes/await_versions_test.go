package processes_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// TestAwaitMatchesTasksOfAnOlderVersion registers a workflow whose await
// reads shop.payments by /orderId, starts a task on it, and then registers
// a version that reads another topic by another pointer: the awaiter still
// reads the first topic, and an event there completes the older version's
// task (it used to read the newest versions' awaits only, and passed the
// event over).
func TestAwaitMatchesTasksOfAnOlderVersion(t *testing.T) {
	ctx := context.Background()
	store := embeddedStore(t)
	reg := processes.NewRegistry(store, nil)
	v1 := awaitFlow(t)
	v1.Version = 0
	_, _, err := reg.Apply(ctx, v1, "test")
	require.NoError(t, err)

	inbox := &processes.AwaitInbox{Store: store, Limits: store, Clock: processes.SystemClock}
	s := &processes.Scheduler{Store: store, Commands: &agent{}, DeadLetters: dropLetters{}, Workflows: reg,
		Actor: "scheduler/0", Clock: processes.SystemClock, Logger: quiet(), Shards: 2, AwaitInbox: inbox}
	run(t, s.Run)
	<-s.Ready()
	r := &awaitRig{t: t, store: store, wf: v1}
	r.awaiter = &processes.Awaiter{Workflows: reg, Inbox: inbox, Correlator: s, Clock: processes.SystemClock, Logger: quiet()}
	r.submit("o-old", "A-1")
	r.awaitEvent("o-old", domain.StepAwaitingType)

	v2, err := domain.ParseDefinition([]byte(`{"name":"pay","steps":[{"name":"captured","budget":"1h","await":{"topic":"shop.captures",
		"typeField":"/kind","correlate":"/order/id","value":"{{ order.orderId }}","succeedOn":["Captured"]}}]}`))
	require.NoError(t, err)
	w, changed, err := reg.Apply(ctx, v2, "test")
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, 2, w.Version)

	topics, err := r.awaiter.Topics(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"shop.captures", "shop.payments"}, topics, "the older version's topic is still read")

	r.publish("PaymentCaptured", "A-1")
	r.awaitEvent("o-old", domain.TaskProcessedType)
	assert.Equal(t, processes.AwaiterStats{Kept: 1, Completed: 1}, r.awaiter.Stats())
}
