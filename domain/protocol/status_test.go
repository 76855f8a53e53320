package protocol_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// noStatus declares the task events that have no status message (none so
// far): StatusOf gives them an empty Status, and the status publisher
// sends nothing for them.
var noStatus = map[string]bool{}

// TestEveryEventHasAStatus fails when an event is registered (domain's
// registry) without a status in StatusOf, unless it is declared in
// noStatus: a missing case would publish an empty status that clients drop.
func TestEveryEventHasAStatus(t *testing.T) {
	task := domain.NewTask("o-1")
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for _, wire := range domain.TaskEventTypes() {
		e, err := domain.DecodeEvent(wire, []byte(`{}`))
		require.NoError(t, err, wire)
		st := protocol.StatusOf(task, e, 3, at)
		if noStatus[wire] {
			assert.Empty(t, st.Status, "%s is declared as having no status", wire)
			continue
		}
		assert.NotEmpty(t, st.Status, "%s has no status name: give it a case in StatusOf, or declare it in noStatus", wire)
		assert.Equal(t, "o-1", st.OrderID, wire)
		assert.Equal(t, uint64(3), st.Revision, wire)
	}
}

// TestSagaTopicsAreReserved keeps every topic saga's protocol names, but the
// orders topic, out of what workflows may trigger on and orders may name as
// replyTo (domain.ReservedTopic knows saga's namespace, not the names).
func TestSagaTopicsAreReserved(t *testing.T) {
	for _, topic := range []string{protocol.RepliesTopic, protocol.StatusTopic, protocol.DeadLetterTopic, protocol.AlertsTopic, protocol.SyncBarrierTopic,
		protocol.CommandTopic("payment"), protocol.OrdersTopic} {
		assert.True(t, domain.ReservedTopic(topic), topic)
	}
	assert.Equal(t, []string{protocol.OrdersTopic}, domain.Trigger{}.TopicsOrDefault())
}
