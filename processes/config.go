package processes

import (
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// Defaults of the processes' settings; a zero setting means its default.
const (
	// DefaultShards is how many tasks a scheduler decides at once. Each
	// decision waits for its append, so this bounds the appends one
	// scheduler has in flight: 256 keeps the store's group commits full
	// at a few hundred orders in flight (64 cost a seventh of the
	// throughput at 256 in flight, and a third more p99).
	DefaultShards = 256
	// DefaultSchedulerCheckpoint names the schedulers' task checkpoint.
	DefaultSchedulerCheckpoint = "scheduler"
	// DefaultSupervisorCheckpoint names the supervisors' task checkpoint.
	DefaultSupervisorCheckpoint = "supervisor"
	// DefaultStatusCheckpoint names the status publishers' checkpoint.
	DefaultStatusCheckpoint = "status"
	// DefaultSupervisorInterval is the time between a supervisor's scans.
	DefaultSupervisorInterval = time.Second
	// DefaultSupervisorGrace is how long past CompleteBy an attempt still
	// has before it times out, so that a reply sent at the last moment wins.
	DefaultSupervisorGrace = 100 * time.Millisecond
	// DefaultStatusCheckpointEvery bounds the time between two checkpoints
	// of the status publisher.
	DefaultStatusCheckpointEvery = 200 * time.Millisecond
	// DefaultStatusRestartAfter is how long the status publisher waits
	// before it restarts from its checkpoint after a failed delivery.
	DefaultStatusRestartAfter = time.Second
)

// ErrInvalidConfig marks a process configured so that it cannot run.
var ErrInvalidConfig = errors.New("invalid configuration")

// ConfigError lists every problem of one process's configuration.
type ConfigError struct {
	// Process names the process: "scheduler", "supervisor", ...
	Process  string
	Problems []string
}

func (e *ConfigError) Error() string {
	return e.Process + ": " + ErrInvalidConfig.Error() + ": " + strings.Join(e.Problems, "; ")
}

// Is makes errors.Is(err, ErrInvalidConfig) hold.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// problems collects a configuration's problems.
type problems struct {
	process string
	list    []string
}

// require notes name as missing unless set.
func (p *problems) require(set bool, name string) {
	if !set {
		p.list = append(p.list, name+" is not set")
	}
}

// notNegative notes a negative duration or count; zero means the default.
func (p *problems) notNegative(v int64, name string) {
	if v < 0 {
		p.list = append(p.list, name+" must not be negative")
	}
}

func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	return &ConfigError{Process: p.process, Problems: p.list}
}

// Validate reports every problem of the scheduler's configuration: the
// ports it needs unset, negative counts or intervals. Run calls it.
func (s *Scheduler) Validate() error {
	p := problems{process: "scheduler"}
	p.require(s.Store != nil, "Store")
	p.require(s.Commands != nil, "Commands")
	p.require(s.DeadLetters != nil, "DeadLetters")
	p.require(s.Workflows != nil, "Workflows")
	p.require(s.Clock != nil, "Clock")
	p.require(s.Logger != nil, "Logger")
	p.require(s.Actor != "", "Actor")
	p.notNegative(int64(s.Shards), "Shards")
	p.notNegative(int64(s.CheckpointEvery), "CheckpointEvery")
	return p.err()
}

// Validate reports every problem of the supervisor's configuration. Run
// calls it.
func (s *Supervisor) Validate() error {
	p := problems{process: "supervisor"}
	p.require(s.Store != nil, "Store")
	p.require(s.Alerts != nil, "Alerts")
	p.require(s.Workflows != nil, "Workflows")
	p.require(s.Clock != nil, "Clock")
	p.require(s.Logger != nil, "Logger")
	p.require(s.Actor != "", "Actor")
	p.notNegative(int64(s.Interval), "Interval")
	p.notNegative(int64(s.Grace), "Grace")
	p.notNegative(int64(s.CheckpointEvery), "CheckpointEvery")
	return p.err()
}

// Validate reports every problem of the submitter's configuration; the
// wiring calls it before orders are consumed.
func (s *Submitter) Validate() error {
	p := problems{process: "submitter"}
	p.require(s.Store != nil, "Store")
	p.require(s.DeadLetters != nil, "DeadLetters")
	p.require(s.Workflows != nil, "Workflows")
	p.require(s.Clock != nil, "Clock")
	p.require(s.Logger != nil, "Logger")
	p.require(s.Actor != "", "Actor")
	p.notNegative(int64(s.MaxOrderSize), "MaxOrderSize")
	return p.err()
}

// Validate reports every problem of the status publisher's configuration.
// Run calls it.
func (p *StatusPublisher) Validate() error {
	c := problems{process: "status publisher"}
	c.require(p.Store != nil, "Store")
	c.require(p.Checkpoints != nil, "Checkpoints")
	c.require(p.Sink != nil, "Sink")
	c.require(p.Logger != nil, "Logger")
	c.require(p.Name != "", "Name")
	c.notNegative(int64(p.CheckpointEvery), "CheckpointEvery")
	return c.err()
}

// Validate reports every problem of the agent's configuration; the wiring
// calls it before commands are consumed.
func (a *Agent) Validate() error {
	p := problems{process: "agent " + a.Name}
	p.require(a.Name != "", "Name")
	p.require(a.Handler != nil, "Handler")
	p.require(a.Replies != nil, "Replies")
	p.require(a.DeadLetters != nil, "DeadLetters")
	p.require(a.Clock != nil, "Clock")
	p.require(a.Logger != nil, "Logger")
	if a.Backoff.Initial < 0 || a.Backoff.Max < 0 || a.Backoff.Multiplier < 0 {
		p.list = append(p.list, "Backoff must not be negative")
	}
	p.notNegative(int64(a.Capacity), "Capacity")
	p.notNegative(int64(a.GlobalLimit), "GlobalLimit")
	p.notNegative(int64(a.Aging), "Aging")
	p.notNegative(int64(a.HangAfter), "HangAfter")
	p.notNegative(int64(a.OpenFor), "OpenFor")
	p.notNegative(int64(a.HeartbeatEvery), "HeartbeatEvery")
	if r := a.RateLimit; r != nil && (r.Calls < 1 || r.PeriodMillis < 1) {
		p.list = append(p.list, "RateLimit needs at least 1 call and a period of at least 1ms")
	}
	return p.err()
}
