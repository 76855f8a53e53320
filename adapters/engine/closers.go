package engine

import (
	"sync"

	"github.com/cockroachdb/errors"
)

// closers is what Close undoes: each step of start-up pushes what stops
// the part it started, right after starting it, and closeAll pops them
// newest first. So a part stops before what it was started on (a process
// before the client it produces with, the clients before the broker), and
// Close after a partial start stops exactly what started.
type closers struct {
	mu   sync.Mutex
	list []closer
	// running names the closer closeAll runs now.
	running string
	// servers counts the servers' closers running now, so that a Close
	// past its timeout still waits for the one closeAll had started.
	servers sync.WaitGroup
}

type closer struct {
	name  string
	close func() error
	// server marks an embedded server's closer, which runs even when a
	// part above it does not stop (takeServers).
	server bool
}

// push adds what stops a part just started.
func (c *closers) push(name string, close func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, closer{name: name, close: close})
}

// pushServer adds what stops an embedded server just started: it closes
// its data cleanly, so Close runs it even past the shutdown timeout.
func (c *closers) pushServer(name string, close func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, closer{name: name, close: close, server: true})
}

// takeServers removes the servers' closers not run yet and returns them,
// newest first, for a Close that stops waiting for the parts above them.
func (c *closers) takeServers() []closer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var servers []closer
	kept := c.list[:0]
	for _, cl := range c.list {
		if cl.server {
			servers = append([]closer{cl}, servers...)
		} else {
			kept = append(kept, cl)
		}
	}
	c.list = kept
	return servers
}

// awaitServers waits until no server's closer that closeAll started is
// running: one it had started when Close stopped waiting still writes the
// server's data.
func (c *closers) awaitServers() { c.servers.Wait() }

// closeAll pops every closer, newest first, runs it, and returns their
// errors joined. Each closer runs once: a second call finds none.
func (c *closers) closeAll() error {
	var errs []error
	for {
		c.mu.Lock()
		if len(c.list) == 0 {
			c.mu.Unlock()
			return errors.Join(errs...)
		}
		last := c.list[len(c.list)-1]
		c.list = c.list[:len(c.list)-1]
		c.running = last.name
		if last.server {
			c.servers.Add(1)
		}
		c.mu.Unlock()
		err := last.close()
		c.mu.Lock()
		c.running = ""
		if last.server {
			c.servers.Done()
		}
		c.mu.Unlock()
		if err != nil {
			errs = append(errs, errors.Wrapf(err, "close %s", last.name))
		}
	}
}

// waiting names the closer running now and those still to run, in the
// order closeAll runs them.
func (c *closers) waiting() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	if c.running != "" {
		out = append(out, c.running)
	}
	for i := len(c.list) - 1; i >= 0; i-- {
		out = append(out, c.list[i].name)
	}
	return out
}
