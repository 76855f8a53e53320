package engine

import (
	"testing"
	"time"

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

// TestAwaitServersWaitsForTheServerBeingClosed: when Close stops waiting
// while closeAll is closing a server, the server's close is not taken
// again, and awaitServers returns only once it has finished.
func TestAwaitServersWaitsForTheServerBeingClosed(t *testing.T) {
	var c closers
	entered, release := make(chan struct{}), make(chan struct{})
	finished := false
	c.pushServer("broker", func() error {
		close(entered)
		<-release
		finished = true
		return nil
	})
	c.push("part", func() error { return nil })
	go func() { _ = c.closeAll() }()
	<-entered
	assert.Empty(t, c.takeServers(), "the server being closed is not taken again")
	waited := make(chan struct{})
	go func() { c.awaitServers(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("awaitServers returned while the server was still closing")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-waited
	assert.True(t, finished)
}
