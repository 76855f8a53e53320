package protocol_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

func TestCommandTopicPerPriorityBand(t *testing.T) {
	assert.Equal(t, "saga.cmd.payment", protocol.CommandTopicFor("payment", domain.PriorityNormal), "normal keeps the topic of agents that know no priorities")
	assert.Equal(t, "saga.cmd.payment", protocol.CommandTopicFor("payment", ""))
	assert.Equal(t, "saga.cmd.payment.high", protocol.CommandTopicFor("payment", domain.PriorityHigh))
	assert.Equal(t, "saga.cmd.payment.low", protocol.CommandTopicFor("payment", domain.PriorityLow))
	assert.Equal(t, []string{"saga.cmd.payment.high", "saga.cmd.payment", "saga.cmd.payment.low"}, protocol.CommandTopics("payment"))
	for _, p := range domain.Priorities() {
		assert.Equal(t, p, protocol.CommandTopicPriority("pay.ment", protocol.CommandTopicFor("pay.ment", p)))
	}
	assert.Equal(t, domain.PriorityNormal, protocol.CommandTopicPriority("high", "saga.cmd.high"), "an agent named high has a normal topic too")
}

func TestReceivedStatusCarriesThePriority(t *testing.T) {
	for _, c := range []struct {
		recorded domain.Priority
		want     domain.Priority
	}{{domain.PriorityHigh, domain.PriorityHigh}, {"", domain.PriorityNormal}} {
		e := domain.TaskSubmitted{TaskID: "o-1", Workflow: "order", WorkflowVersion: 1, Steps: []string{"a"}, Priority: c.recorded}
		task := domain.Fold("o-1", []domain.Event{e})
		st := protocol.StatusOf(task, e, 0, time.Unix(0, 0))
		assert.Equal(t, c.want, st.Priority)
		assert.Equal(t, c.want, protocol.ViewOf(task).Priority)
	}
}
