package engine

import (
	"time"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/agentruntime"
)

// AgentInstances configures the instances of the agents a process runs
// (the agents role): how many calls each makes at once, the limits shared
// by all the instances of an agent, and when calls hang. Maps are by agent
// name.
type AgentInstances struct {
	// Capacity bounds an agent's calls at once in this process; agents
	// not named take DefaultCapacity (0: agentruntime.DefaultAgentCapacity).
	Capacity        map[string]int
	DefaultCapacity int
	// RateLimit bounds an agent's calls per period across its instances.
	RateLimit map[string]protocol.RateLimit
	// GlobalLimit bounds an agent's calls at once across its instances.
	GlobalLimit map[string]int
	// HangAfter is an agent's latency budget; agents not named take
	// DefaultHangAfter (0: agentruntime.DefaultHangAfter).
	HangAfter        map[string]time.Duration
	DefaultHangAfter time.Duration
	// HeartbeatEvery is the time between the agents' heartbeats; 0 means
	// protocol.DefaultHeartbeatEvery, negative sends none (the scheduler
	// then dispatches to the agents by task id, with no capacity limit).
	HeartbeatEvery time.Duration
	// Directory, when set, tells how many instances of an agent are live,
	// so that each takes its share of the limits; default the engine's
	// agent directory (App.AgentDirectory), which runs with the scheduler
	// or api role, or when an agent has a shared limit.
	Directory agent.Directory
}

// shared reports whether an agent has a limit its instances share.
func (c AgentInstances) shared() bool { return len(c.RateLimit) > 0 || len(c.GlobalLimit) > 0 }

// configure sets an agent's instance settings in cfg.
func (c AgentInstances) configure(name string, cfg *agent.Config) {
	cfg.Capacity = c.DefaultCapacity
	if n, ok := c.Capacity[name]; ok {
		cfg.Capacity = n
	}
	if r, ok := c.RateLimit[name]; ok {
		cfg.RateLimit = &r
	}
	cfg.GlobalLimit = c.GlobalLimit[name]
	cfg.HeartbeatEvery = c.HeartbeatEvery
	cfg.HangAfter = c.DefaultHangAfter
	if d, ok := c.HangAfter[name]; ok {
		cfg.HangAfter = d
	}
}

// directory is the directory the agents share their limits by.
func (a *App) directory() agent.Directory {
	if d := a.cfg.AgentInstances.Directory; d != nil {
		return d
	}
	if a.AgentDirectory != nil {
		return a.AgentDirectory
	}
	return nil
}

// agentInstance names this process's instance of an agent:
// <instance>/<agent> when the process was given an instance name, else
// one unique to the process (agentruntime.DefaultInstance), so that two
// processes on one host never share a heartbeat key.
func (a *App) agentInstance(name string) string {
	if a.cfg.instanceGiven {
		return a.cfg.Instance + "/" + name
	}
	return agentruntime.DefaultInstance(name)
}
