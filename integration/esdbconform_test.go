package integration_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// TestLargestOrderFitsItsOwnStore: an order of the largest size sagad
// accepts by default becomes a task in sagad's own event store, whose
// appends are bounded by KurrentDB's default of 1 MiB: the order limit is
// set below the store's.
func TestLargestOrderFitsItsOwnStore(t *testing.T) {
	s := startSystem(t, engine.Config{})
	head := `{"orderId":"largest-1","items":[{"sku":"book","qty":1}],"pad":"`
	body := head + strings.Repeat("p", processes.DefaultMaxOrderSize-len(head)-2) + `"}`
	assert.Len(t, body, processes.DefaultMaxOrderSize)
	s.publish("largest-1", []byte(body))
	tasks := s.awaitTerminal([]string{"largest-1"}, 60*time.Second)
	assert.Equal(t, domain.StateProcessed, tasks["largest-1"].State)
}
