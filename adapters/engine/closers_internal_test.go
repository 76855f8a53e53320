package engine

import (
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
)

// TestClosersCloseNewestFirstOnceAndJoinTheirErrors: closeAll runs every
// closer once, in the reverse of the order they were pushed, goes on past
// a failing one and reports each failure; a second call runs none.
func TestClosersCloseNewestFirstOnceAndJoinTheirErrors(t *testing.T) {
	var c closers
	var order []string
	for _, name := range []string{"server", "client", "process"} {
		c.push(name, func() error {
			order = append(order, name)
			if name != "client" {
				return errors.Newf("%s failed", name)
			}
			return nil
		})
	}
	err := c.closeAll()
	assert.Equal(t, []string{"process", "client", "server"}, order)
	assert.ErrorContains(t, err, "close process: process failed")
	assert.ErrorContains(t, err, "close server: server failed")
	assert.NoError(t, c.closeAll())
	assert.Len(t, order, 3, "nothing closed twice")
}

// TestTakeServersLeavesThePartsInOrder: the servers' closers come out
// newest first, and the parts' stay in their order.
func TestTakeServersLeavesThePartsInOrder(t *testing.T) {
	var c closers
	var ran []string
	for _, name := range []string{"event store", "client", "broker", "part"} {
		run := func() error { ran = append(ran, name); return nil }
		if name == "event store" || name == "broker" {
			c.pushServer(name, run)
		} else {
			c.push(name, run)
		}
	}
	for _, s := range c.takeServers() {
		_ = s.close()
	}
	assert.NoError(t, c.closeAll())
	assert.Equal(t, []string{"broker", "event store", "part", "client"}, ran)
}
