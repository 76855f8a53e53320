package integration_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/topics"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// metric reads one sample from the API's /metrics.
func (s *system) metric(name string) string {
	s.t.Helper()
	resp, err := http.Get("http://" + s.app.HTTPAddr + "/metrics")
	require.NoError(s.t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimPrefix(line, name+" ")
		}
	}
	return ""
}

// TestHostileInput sends every kind of bad input saga meets from outside:
// each is dead-lettered with its reason or ignored and counted, nothing
// crashes, and orders sent afterwards still succeed.
func TestHostileInput(t *testing.T) {
	s := startSystem(t, engine.Config{})
	s.publish("good-1", []byte(`{"orderId":"good-1"}`))
	s.awaitTerminal([]string{"good-1"}, 30*time.Second)

	orders := map[string]string{
		"not-json":         `{"orderId": "x",`,
		"not-object":       `"o-1"`,
		"wrong-type":       `{"orderId": ["o-1"]}`,
		"missing-id":       `{"items": []}`,
		"bad-id":           `{"orderId": "../../etc/passwd"}`,
		"unknown-workflow": `{"orderId": "wf-x", "workflow": "teleport"}`,
		"huge":             `{"orderId": "huge-1", "pad": "` + strings.Repeat("x", 10<<20) + `"}`,
	}
	for key, body := range orders {
		s.publish(key, []byte(body))
	}
	s.publish("good-1", []byte(`{"orderId":"good-1"}`)) // a duplicate

	client := s.producer()
	replies := map[string]string{
		"unknown-task": `{"taskId":"nobody","step":"reserve-inventory","attempt":1,"outcome":"succeeded"}`,
		"made-up-step": `{"taskId":"good-1","step":"teleport","attempt":1,"outcome":"succeeded"}`,
		"bad-reply":    `{"taskId":`,
		"stale":        `{"taskId":"good-1","step":"reserve-inventory","attempt":1,"outcome":"failed","failure":"permanent"}`,
	}
	for key, body := range replies {
		require.NoError(t, client.ProduceSync(ctx(t, 10*time.Second), &kgo.Record{Topic: protocol.RepliesTopic, Key: []byte(key), Value: []byte(body)}).FirstErr())
	}
	require.NoError(t, client.ProduceSync(ctx(t, 10*time.Second), &kgo.Record{Topic: protocol.CommandTopic("inventory"), Key: []byte("bad-command"),
		Value: []byte(`{"taskId":"good-1","step":"reserve-inventory","action":"explode","attempt":1}`)}).FirstErr())

	wantDead := len(orders) + 3 + 1 // orders, invalid replies, the invalid command
	dead := s.consumeTopic(protocol.DeadLetterTopic, wantDead, 60*time.Second)
	reasons := map[string]string{}
	for _, r := range dead {
		for _, h := range r.Headers {
			if h.Key == kafka.HeaderDeadLetterReason {
				reasons[string(r.Key)] = string(h.Value)
			}
		}
		if body, ok := orders[string(r.Key)]; ok {
			d := topics.NewDeadLetter(r)
			assert.Equal(t, len(body), d.Size, "%s size", r.Key)
			if string(r.Key) == "huge" {
				assert.True(t, d.ByReference, "an order over the limit is dead-lettered by reference")
				assert.LessOrEqual(t, len(r.Value), kafka.DeadLetterPrefixBytes)
			} else {
				assert.Equal(t, len(body), len(r.Value), "%s kept whole", r.Key)
			}
		}
	}
	for key, want := range map[string]string{
		"not-json": "not valid JSON", "not-object": "not a JSON object", "wrong-type": "must be a string",
		"missing-id": "no orderId", "bad-id": "orderId", "unknown-workflow": "unknown workflow", "huge": "over the limit",
		"unknown-task": "task not found", "made-up-step": "unknown step", "bad-reply": "not valid JSON", "bad-command": "idempotencyKey",
	} {
		assert.Contains(t, reasons[key], want, key)
	}
	assert.NotContains(t, reasons, "stale", "a stale reply is ignored, not dead-lettered")

	require.Eventually(t, func() bool { return s.metric(`saga_replies_total{outcome="stale"}`) == "1" }, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, "1", s.metric(`saga_orders_total{outcome="duplicate"}`))
	assert.Equal(t, "7", s.metric(`saga_orders_total{outcome="dead_lettered"}`))
	assert.Equal(t, "3", s.metric(`saga_replies_total{outcome="dead_lettered"}`))
	assert.Equal(t, "1", s.metric(`saga_agent_commands_total{agent="inventory",outcome="dead_lettered"}`))

	// Still healthy: the good task is untouched and a new order succeeds.
	assert.Equal(t, happyPath, types(s.stream("good-1")))
	s.publish("good-2", []byte(`{"orderId":"good-2"}`))
	assert.Equal(t, domain.StateProcessed, s.awaitTerminal([]string{"good-2"}, 30*time.Second)["good-2"].State)
	var health map[string]string
	resp, err := http.Get("http://" + s.app.HTTPAddr + "/healthz")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&health))
	resp.Body.Close()
	assert.Equal(t, "ok", health["status"])
}
