package integration_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/workflowfile"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestACloudEventInBinaryModeStartsAWorkflowWithATypeField: a workflow
// that reads its type at /type starts on a CloudEvent whose type is only
// in its ce_type header, published with kcat; one of another type is
// dead-lettered with a reason that says what was read where.
func TestACloudEventInBinaryModeStartsAWorkflowWithATypeField(t *testing.T) {
	requireTools(t, "kcat")
	shop := startShop(t)
	s := startSystem(t, engine.Config{})
	w, err := workflowfile.Parse("ship-on-order.yaml", []byte(`
name: ship-on-order
trigger: {topics: [shop.cloudevents], type: OrderPlaced, typeField: /type, idField: /order/id}
steps:
  - name: confirm
    http: {url: "`+shop+`/email"}
`))
	require.NoError(t, err)
	s.register(w)

	brokers := strings.Join(s.app.KafkaBrokers, ",")
	publish := func(key, ceType, body string) {
		cmd := exec.Command("kcat", "-P", "-b", brokers, "-t", "shop.cloudevents", "-k", key, "-H", "ce_type="+ceType,
			"-H", "ce_specversion=1.0", "-H", "ce_id="+key, "-H", "ce_source=/shop")
		cmd.Stdin = strings.NewReader(body + "\n")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	publish("B-1", "OrderPlaced", `{"order":{"id":"B-1"}}`)
	task := s.awaitTerminal([]string{"B-1"}, 60*time.Second)["B-1"]
	require.Equal(t, domain.StateProcessed, task.State, task.Reason)
	assert.Equal(t, "ship-on-order", task.Workflow)

	publish("B-2", "OrderShipped", `{"order":{"id":"B-2"}}`)
	dead := s.consumeTopic(protocol.DeadLetterTopic, 1, 30*time.Second)
	assert.Equal(t, "B-2", string(dead[0].Key))
	reason := ""
	for _, h := range dead[0].Headers {
		if h.Key == "saga_deadletter_reason" {
			reason = string(h.Value)
		}
	}
	assert.Contains(t, reason, `read no /type field, ce_type header "OrderShipped"`)
}
