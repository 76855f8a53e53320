package engine

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// inProcessCommands is the scheduler's CommandSender (and DeadLetters) in
// a process that also runs agents: a command whose route names an agent
// instance of this process is handed to it directly (agent.Execute), and
// its reply comes back to the scheduler the same way (RecordReply), so a
// step costs no Kafka hop. Every other command goes through Kafka.
//
// Nothing changes in what is recorded or recovered: the dispatch is
// appended before the command is handed over, as before it is produced; a
// command or reply lost with the process is sent again by the scheduler
// after a restart, or retried by the supervisor once its complete-by
// passes, exactly as one lost in the broker's page cache. Routing is the
// scheduler's as before: it chooses the instance by room and health among
// all the agent's instances, here or in other processes, so instances
// elsewhere keep their share.
type inProcessCommands struct {
	*kafka.Producer
	ctx     context.Context
	replies processes.ReplySender
	logger  *slog.Logger
	// handing are the commands handed over whose calls still run.
	handing sync.WaitGroup

	mu     sync.RWMutex
	agents map[string]*agent.Agent // by instance

	handed atomic.Int64
}

var _ processes.CommandSender = (*inProcessCommands)(nil)

// add makes an agent instance of this process take its commands directly.
func (c *inProcessCommands) add(ag *agent.Agent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.agents == nil {
		c.agents = map[string]*agent.Agent{}
	}
	c.agents[ag.Instance()] = ag
}

// has reports whether instance is an agent instance of this process.
func (c *inProcessCommands) has(instance string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.agents[instance] != nil
}

// SendCommand hands cmd to the instance of this process its route names,
// or produces it to Kafka.
func (c *inProcessCommands) SendCommand(ctx context.Context, cmd protocol.ExecuteStep) error {
	if cmd.Route == nil || c.ctx.Err() != nil {
		return c.Producer.SendCommand(ctx, cmd)
	}
	c.mu.RLock()
	ag := c.agents[cmd.Route.Instance]
	c.mu.RUnlock()
	if ag == nil {
		return c.Producer.SendCommand(ctx, cmd)
	}
	c.handed.Add(1)
	c.handing.Add(1)
	go func() {
		defer c.handing.Done()
		// The process's context, not the dispatch's: the call outlives
		// the decision that sent it.
		if err := ag.Execute(c.ctx, cmd, c.replies); err != nil && c.ctx.Err() == nil {
			c.logger.Warn("in-process command not answered; the supervisor retries it at its complete-by", "task", cmd.TaskID,
				"step", cmd.Step, "attempt", cmd.Attempt, "err", err.Error())
		}
	}()
	return nil
}

// wait waits for the calls of the commands handed over. Call it once the
// scheduler, which hands them, has stopped: then none is added meanwhile.
func (c *inProcessCommands) wait() { c.handing.Wait() }

// Handed counts the commands handed to agents of this process.
func (c *inProcessCommands) Handed() int64 { return c.handed.Load() }
