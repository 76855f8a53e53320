package engine

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/metrics"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// queuesTimeout bounds how long a view of agents waits for Kafka to tell
// the depth of their command topics.
const queuesTimeout = 2 * time.Second

// startAgentDirectory runs the directory of agent instances, which the
// scheduler routes by and the API and console show; agents with limits
// shared by their instances read it too, to know their share.
func (a *App) startAgentDirectory(ctx context.Context) error {
	cfg := &a.cfg
	if !cfg.has(RoleScheduler) && !cfg.has(RoleAPI) && (!cfg.has(RoleAgents) || !cfg.AgentInstances.shared()) {
		return nil
	}
	dir, err := kafka.NewAgentDirectory(kafka.AgentDirectoryConfig{Brokers: a.KafkaBrokers, Opts: a.kafkaOpts, Logger: a.logger, Now: a.cfg.Clock})
	if err != nil {
		return err
	}
	a.AgentDirectory = dir
	a.run("agent directory", func() error { return dir.Run(ctx) })
	return nil
}

// agentsView is the view of agents the API, the console and the metrics
// show: the directory's instances, the agents of the registered workflows
// (so that one without instances shows), and their queued commands.
type agentsView struct {
	dir *kafka.AgentDirectory
	// registered lists the agents of the registered workflows.
	registered func(context.Context) ([]string, error)
	adm        *kadm.Client
	now        func() time.Time
	// held counts, by agent and priority, the steps the scheduler in this
	// process holds until their agent has room; nil without a scheduler.
	held func() map[string]map[domain.Priority]int
}

var _ httpapi.Agents = agentsView{}

// Agents implements httpapi.Agents.
func (v agentsView) Agents(ctx context.Context) (protocol.AgentList, error) {
	now := v.now()
	views, err := v.views(ctx, now, "")
	return protocol.AgentList{Agents: views, At: now}, err
}

// Agent implements httpapi.Agents.
func (v agentsView) Agent(ctx context.Context, name string) (protocol.AgentView, bool, error) {
	views, err := v.views(ctx, v.now(), name)
	if err != nil || len(views) == 0 {
		return protocol.AgentView{}, false, err
	}
	return views[0], true, nil
}

// views builds the views of every agent, or of only one when only is set.
func (v agentsView) views(ctx context.Context, now time.Time, only string) ([]protocol.AgentView, error) {
	registered, err := v.registered(ctx)
	if err != nil {
		return nil, err
	}
	instances := map[string][]protocol.AgentInstanceView{}
	for _, in := range v.dir.All(now) {
		instances[in.Heartbeat.Agent] = append(instances[in.Heartbeat.Agent], protocol.AgentInstanceView{AgentHeartbeat: in.Heartbeat, Gone: in.Gone})
	}
	var names []string
	for name := range instances {
		names = append(names, name)
	}
	for _, name := range registered {
		if _, seen := instances[name]; !seen {
			names = append(names, name)
		}
	}
	if only != "" {
		if !slices.Contains(names, only) {
			return nil, nil
		}
		names = []string{only}
	}
	slices.Sort(names)
	views := make([]protocol.AgentView, 0, len(names))
	var held map[string]map[domain.Priority]int
	if v.held != nil {
		held = v.held()
	}
	for _, name := range names {
		view := protocol.NewAgentView(name, slices.Contains(registered, name), instances[name])
		view.Held = held[name]
		views = append(views, view)
	}
	if len(names) == 0 {
		return views, nil
	}
	queuesCtx, cancel := context.WithTimeout(ctx, queuesTimeout)
	defer cancel()
	queues, err := kafka.CommandQueues(queuesCtx, v.adm, names...)
	for i := range views {
		queued, ok := queues[views[i].Name]
		switch {
		case err != nil:
			views[i].QueueError = err.Error()
		case !ok:
			views[i].QueueError = "no agent can have this name: it has no command topics"
		default:
			views[i].Queued = queued
		}
	}
	return views, nil
}

// registerDirectoryMetrics adds the gauges of the live agent instances and
// of the agents' queued commands, and the directory's counters.
func (a *App) registerDirectoryMetrics(m *metrics.Metrics) {
	dir := a.AgentDirectory
	m.WatchAgents(func() []protocol.AgentHeartbeat {
		var live []protocol.AgentHeartbeat
		for _, in := range dir.All(a.cfg.Clock()) {
			if !in.Gone {
				live = append(live, in.Heartbeat)
			}
		}
		return live
	}, func(ctx context.Context) (map[string]map[domain.Priority]int64, error) {
		names, err := a.Workflows.Agents(ctx)
		if err != nil {
			return nil, err
		}
		for _, in := range dir.All(a.cfg.Clock()) {
			if !slices.Contains(names, in.Heartbeat.Agent) {
				names = append(names, in.Heartbeat.Agent)
			}
		}
		return kafka.CommandQueues(ctx, kadm.NewClient(a.client), names...)
	})
	m.Register(metrics.Family{Name: "saga_agent_held_steps", Type: gauge, Labels: []string{"agent", "priority"},
		Help: "Steps this process's scheduler holds until their agent has room (StepWaiting), by agent and priority.",
		Read: func(emit func(float64, ...string)) {
			if a.Scheduler == nil {
				return
			}
			for agent, byPriority := range a.Scheduler.WaitingByPriority() {
				for p, n := range byPriority {
					emit(float64(n), agent, string(p))
				}
			}
		}})
	m.Register(metrics.Family{Name: "saga_agent_heartbeats_total", Type: counter, Labels: []string{"outcome"},
		Help: "Records of saga.agents the agent directory read, by outcome: applied (a heartbeat), tombstone, invalid (ignored), evicted (an instance dropped to keep within the cap).",
		Read: func(emit func(float64, ...string)) {
			st := dir.Stats()
			emit(float64(st.Heartbeats), "applied")
			emit(float64(st.Tombstones), "tombstone")
			emit(float64(st.Invalid), "invalid")
			emit(float64(st.Evicted), "evicted")
		}})
}
