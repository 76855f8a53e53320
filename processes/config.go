package processes

import (
	"cmp"
	"time"

	"github.com/sagaengine/saga/processes/port"
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
	// DefaultSupervisorStoreTimeout is how long a leading supervisor goes
	// without an answer from the event store before it gives up its lease
	// to a standby that may reach the store.
	DefaultSupervisorStoreTimeout = 5 * time.Second
	// DefaultStatusCheckpointEvery bounds the time between two checkpoints
	// of the status publisher.
	DefaultStatusCheckpointEvery = 200 * time.Millisecond
	// DefaultStatusRestartAfter is how long the status publisher waits
	// before it restarts from its checkpoint after a failed delivery.
	DefaultStatusRestartAfter = time.Second
)

// ErrInvalidConfig marks a process configured so that it cannot run.
var ErrInvalidConfig = port.ErrInvalidConfig

// ConfigError lists every problem of one process's configuration.
type ConfigError = port.ConfigError

// Validate reports every problem of the scheduler's configuration: the
// ports it needs unset, negative counts or intervals. Run calls it.
func (s *Scheduler) Validate() error {
	p := port.Problems{Process: "scheduler"}
	p.Require(s.Store != nil, "Store")
	p.Require(s.Commands != nil, "Commands")
	p.Require(s.DeadLetters != nil, "DeadLetters")
	p.Require(s.Workflows != nil, "Workflows")
	p.Require(s.Clock != nil, "Clock")
	p.Require(s.Logger != nil, "Logger")
	p.Require(s.Actor != "", "Actor")
	p.NotNegative(int64(s.Shards), "Shards")
	p.NotNegative(int64(s.CheckpointEvery), "CheckpointEvery")
	return p.Err()
}

// Validate reports every problem of the supervisor's configuration. Run
// calls it.
func (s *Supervisor) Validate() error {
	p := port.Problems{Process: "supervisor"}
	p.Require(s.Store != nil, "Store")
	p.Require(s.Alerts != nil, "Alerts")
	p.Require(s.Workflows != nil, "Workflows")
	p.Require(s.Clock != nil, "Clock")
	p.Require(s.Logger != nil, "Logger")
	p.Require(s.Actor != "", "Actor")
	p.NotNegative(int64(s.Interval), "Interval")
	p.NotNegative(int64(s.Grace), "Grace")
	p.NotNegative(int64(s.StoreTimeout), "StoreTimeout")
	if interval := cmp.Or(s.Interval, DefaultSupervisorInterval); s.StoreTimeout > 0 && s.StoreTimeout < interval {
		p.Add("StoreTimeout (" + s.StoreTimeout.String() + ") must be at least Interval (" + interval.String() + ")")
	}
	p.NotNegative(int64(s.CheckpointEvery), "CheckpointEvery")
	return p.Err()
}

// Validate reports every problem of the submitter's configuration; the
// wiring calls it before orders are consumed.
func (s *Submitter) Validate() error {
	p := port.Problems{Process: "submitter"}
	p.Require(s.Store != nil, "Store")
	p.Require(s.DeadLetters != nil, "DeadLetters")
	p.Require(s.Workflows != nil, "Workflows")
	p.Require(s.Clock != nil, "Clock")
	p.Require(s.Logger != nil, "Logger")
	p.Require(s.Actor != "", "Actor")
	p.NotNegative(int64(s.MaxOrderSize), "MaxOrderSize")
	return p.Err()
}

// Validate reports every problem of the status publisher's configuration.
// Run calls it.
func (p *StatusPublisher) Validate() error {
	c := port.Problems{Process: "status publisher"}
	c.Require(p.Store != nil, "Store")
	c.Require(p.Checkpoints != nil, "Checkpoints")
	c.Require(p.Sink != nil, "Sink")
	c.Require(p.Logger != nil, "Logger")
	c.Require(p.Name != "", "Name")
	c.NotNegative(int64(p.CheckpointEvery), "CheckpointEvery")
	if r := p.Retention; r != nil {
		c.Require(r.Workflows != nil, "Retention.Workflows")
		c.Require(r.Limits != nil, "Retention.Limits")
		c.NotNegative(int64(r.Concurrency), "Retention.Concurrency")
	}
	return c.Err()
}
