package integration_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

func statusLine(st protocol.TaskStatus) string {
	return strings.TrimSpace(st.Status + " " + st.Step)
}

func statusLines(sts []protocol.TaskStatus) []string {
	out := make([]string, len(sts))
	for i, st := range sts {
		out[i] = statusLine(st)
	}
	return out
}

// TestReplyTopicCarriesTheExactStatusSequence submits orders through the Go
// client, with a second status publisher running so that every status
// arrives twice, and checks that each order's statuses, duplicates removed
// by revision, are exactly those its events imply.
func TestReplyTopicCarriesTheExactStatusSequence(t *testing.T) {
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{fastWorkflow(time.Second)},
		Faults: map[string][]demo.Fault{"payment": {{Mode: demo.FaultPermanent, Rate: 0.5}}}})
	second, err := engine.Start(engine.Config{Instance: "second", Roles: []engine.Role{engine.RoleStatus},
		KafkaBrokers: s.app.KafkaBrokers, EventStoreURL: s.app.EventStoreURL, Logger: testLogger()})
	require.NoError(t, err)
	t.Cleanup(second.Close)

	c, err := client.New(ctx(t, 10*time.Second), client.Config{Brokers: s.app.KafkaBrokers})
	require.NoError(t, err)
	defer c.Close()
	ids := orderIDs("reply", 20)
	outcomes := make([]client.Outcome, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func(i int, id string) {
			defer wg.Done()
			out, err := c.Run(ctx(t, 60*time.Second), id, map[string]any{"items": []string{"book"}})
			assert.NoError(t, err, id)
			outcomes[i] = out
		}(i, id)
	}
	wg.Wait()

	processed := []string{"received", "step-dispatched reserve-inventory", "step-succeeded reserve-inventory",
		"step-dispatched charge-payment", "step-succeeded charge-payment",
		"step-dispatched schedule-shipping", "step-succeeded schedule-shipping", "processed"}
	compensated := []string{"received", "step-dispatched reserve-inventory", "step-succeeded reserve-inventory",
		"step-dispatched charge-payment", "step-failed charge-payment", "compensating charge-payment",
		"compensation-dispatched reserve-inventory", "step-compensated reserve-inventory", "compensated"}
	kinds := map[string]int{}
	for i, id := range ids {
		out := outcomes[i]
		kinds[out.Final.Status]++
		switch out.Final.Status {
		case protocol.StatusProcessed:
			assert.Equal(t, processed, statusLines(out.Statuses), id)
		case protocol.StatusCompensated:
			assert.Equal(t, compensated, statusLines(out.Statuses), id)
		default:
			t.Errorf("%s ended %s", id, out.Final.Status)
		}
		events := s.stream(id)
		require.Len(t, out.Statuses, len(events), "one status per event of %s", id)
		for j, st := range out.Statuses {
			assert.Equal(t, uint64(j), st.Revision)
			assert.Equal(t, id, st.OrderID)
			assert.WithinDuration(t, events[j].Recorded, st.Time, time.Millisecond)
		}
	}
	assert.Positive(t, kinds[protocol.StatusProcessed], "%v", kinds)
	assert.Positive(t, kinds[protocol.StatusCompensated], "%v", kinds)
	assert.Greater(t, c.Received(), len(ids)*8, "the duplicates of the second publisher arrived and were dropped")
}

func TestStatusMessagesAreCloudEventsOnTheOrdersTrace(t *testing.T) {
	s := startSystem(t, engine.Config{})
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	order := &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte("traced-1"), Value: []byte(`{"orderId":"traced-1","replyTo":"reply.traced"}`),
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + trace + "-00f067aa0ba902b7-01")}}}
	require.NoError(t, s.producer().ProduceSync(ctx(t, 10*time.Second), order).FirstErr())
	records := s.consumeTopic("reply.traced", 8, 30*time.Second)
	for _, r := range records {
		headers := map[string]string{}
		for _, h := range r.Headers {
			headers[h.Key] = string(h.Value)
		}
		assert.Equal(t, "traced-1", string(r.Key))
		assert.Equal(t, "1.0", headers[kafka.HeaderSpecVersion])
		assert.Equal(t, protocol.StatusMessageType, headers[kafka.HeaderType])
		assert.NotEmpty(t, headers[kafka.HeaderID])
		assert.Equal(t, "application/json", headers[kafka.HeaderContentType])
		assert.Contains(t, headers["traceparent"], "00-"+trace+"-", "statuses continue the order's trace")
	}
	all := s.consumeTopic(protocol.StatusTopic, 8, 30*time.Second)
	assert.Len(t, all, 8, "saga.status carries the same statuses")
}
