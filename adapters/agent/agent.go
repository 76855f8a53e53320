// Package agent is saga's Go SDK for agents: the programs that carry out
// the steps of workflows by calling remote services. Write a Handler and
// give it to Run:
//
//	err := agent.Run(ctx, agent.Config{Brokers: []string{"127.0.0.1:9092"}}, "payment",
//		func(ctx context.Context, req agent.Request) (any, error) {
//			if req.Compensating() {
//				var charge struct{ PaymentID string }
//				_ = req.DecodeUndone(&charge) // the result of the step being undone
//				return nil, refund(ctx, charge.PaymentID, req.IdempotencyKey)
//			}
//			var order struct{ Amount float64 }
//			if err := req.DecodeOrder(&order); err != nil {
//				return nil, agent.Permanent(err) // retrying cannot help
//			}
//			id, err := charge(ctx, order.Amount, req.IdempotencyKey)
//			return map[string]string{"paymentId": id}, err // any other error is retried
//		})
//
// The agent consumes the workflow steps' commands from Kafka
// (saga.cmd.<name>, and saga.cmd.<name>.high and .low, the priority bands),
// in a consumer group shared by every instance of the agent, and does
// everything saga's own agents do: it makes at most Capacity calls at once
// (and its share of GlobalLimit and RateLimit), taking higher-priority
// commands first when more wait, a command's priority rising one band for
// every PriorityAging it has waited, so that none starves; it announces
// itself on saga.agents with heartbeats (health, capacity, partitions),
// and while its breaker is open or its calls hang it gives commands back
// (outcome unavailable) for the scheduler to send elsewhere; it gives the
// handler a
// context that ends at the command's complete-by deadline, retries
// transient errors with backoff and jitter inside it, guards the service
// with a circuit breaker, replies to the scheduler, stays silent once the
// deadline has passed, counts what it did (Stats, WriteMetrics) and, when
// ctx ends, finishes the calls in flight before it returns.
//
// The handler must pass Request.IdempotencyKey to the remote service, so
// that a repeated command (a retry, a redelivery after a crash) has no
// second effect.
//
// Each command is a span of the order's trace (OpenTelemetry, on
// Config.TracerProvider or the global provider), and the handler's context
// carries it: an HTTP call that sends TraceParent(ctx) as its traceparent
// header (or any OpenTelemetry instrumentation of the call) continues the
// trace at the remote service. Agents in other languages follow docs/protocol.md instead.
package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
	"github.com/sagaengine/saga/processes/agentruntime"
)

// ErrPermanent marks a failure that retrying cannot fix (see Permanent).
var ErrPermanent = agentruntime.ErrPermanent

// ErrNoResult is returned by the Decode methods when there is nothing to
// decode: no such step result, or no result of the step being undone.
var ErrNoResult = errors.New("no result")

// Permanent marks err as a failure retrying cannot fix: the remote service
// refused for good and nothing took effect. The step then fails at once
// (and its workflow compensates or stops, as its definition says). Any
// error not marked so is transient and retried.
func Permanent(err error) error { return agentruntime.Permanent(err) }

// Request is one command: a step to carry out, or to undo.
type Request struct {
	TaskID          string
	Workflow        string
	WorkflowVersion int
	Step            string
	// Compensation names the compensating action when the request undoes
	// the step (Compensating); empty otherwise.
	Compensation string
	// Attempt counts the attempts of this step (or of its compensation),
	// from 1.
	Attempt int
	// IdempotencyKey is the same for every attempt of the step (another
	// for its compensation): pass it to the remote service.
	IdempotencyKey string
	// CompleteBy is the deadline; the handler's context ends then.
	CompleteBy time.Time
	// Order is the message that started the task.
	Order json.RawMessage
	// Results are the results of the steps that succeeded before this one
	// (when undoing, of every step that succeeded), by step name.
	Results map[string]json.RawMessage
	// Result is, when undoing a step, that step's result.
	Result json.RawMessage

	command protocol.ExecuteStep
}

// Compensating reports whether the request undoes a step.
func (r Request) Compensating() bool { return r.command.Action == protocol.ActionCompensate }

// DecodeOrder decodes the order into v.
func (r Request) DecodeOrder(v any) error {
	return errors.Wrap(json.Unmarshal(r.Order, v), "decode the order")
}

// DecodeResult decodes the result of an earlier step into v.
func (r Request) DecodeResult(step string, v any) error {
	raw, ok := r.Results[step]
	if !ok {
		return errors.Wrapf(ErrNoResult, "step %s", step)
	}
	return errors.Wrapf(json.Unmarshal(raw, v), "decode the result of step %s", step)
}

// DecodeUndone decodes, when undoing a step, that step's result into v.
func (r Request) DecodeUndone(v any) error {
	if len(r.Result) == 0 {
		return errors.Wrapf(ErrNoResult, "step %s has no result to undo", r.Step)
	}
	return errors.Wrapf(json.Unmarshal(r.Result, v), "decode the result of step %s", r.Step)
}

// Command returns the command as it arrived, for handlers that need all of
// it (saga's built-in HTTP agent does).
func (r Request) Command() protocol.ExecuteStep { return r.command }

// RequestOf returns the request of a command.
func RequestOf(cmd protocol.ExecuteStep) Request {
	return Request{TaskID: cmd.TaskID, Workflow: cmd.Workflow, WorkflowVersion: cmd.WorkflowVersion, Step: cmd.Step,
		Compensation: cmd.Compensation, Attempt: cmd.Attempt, IdempotencyKey: cmd.IdempotencyKey, CompleteBy: cmd.CompleteBy,
		Order: cmd.Order, Results: cmd.Results, Result: cmd.Result, command: cmd}
}

// Handler carries out one request and returns its result, which saga
// records and hands to later steps and to the step's compensation. The
// result is encoded as JSON (a json.RawMessage as it is; nil for none) and
// may be at most 64 KiB. Return Permanent(err) when retrying cannot help.
// A handler that panics fails the step for good, as Permanent would (the
// panic and its stack are logged): the same command would panic again.
type Handler func(ctx context.Context, req Request) (result any, err error)

// Directory knows the live instances of agents, from their heartbeats on
// protocol.AgentsTopic: Instances returns the last heartbeat of each live
// instance of an agent.
type Directory = processes.AgentDirectory

// BreakerState is what breakers a handler keeps itself say: Open while
// they refuse calls, Trial once a trial call may go through, and Cause, the
// failure that opened them.
type BreakerState = agentruntime.BreakerState

// Config configures an agent. Brokers is required.
type Config struct {
	Brokers []string
	// Group is the Kafka consumer group shared by the agent's instances;
	// default "saga-agent-<name>", the group of saga's own agents.
	Group string
	// Backoff spaces retries inside a command's deadline; default 50 ms
	// doubling up to 1 s, a fifth random.
	Backoff domain.Backoff
	// BreakerOpenFor is how long the circuit breaker stays open once the
	// service fails too often; default 2 s; negative means no breaker.
	BreakerOpenFor time.Duration
	// Capacity bounds the calls the instance makes at once; default
	// agentruntime.DefaultAgentCapacity (1024). Past it, commands wait, and
	// higher priorities go first; the instance receives up to
	// 2×Capacity+16 commands, so that it can give back those waiting when
	// it turns unhealthy. Heartbeats announce it, and a scheduler that reads
	// them never sends an instance more than it has room for.
	Capacity int
	// MaxInFlight is the former name of Capacity, used when Capacity is 0.
	//
	// Deprecated: use Capacity.
	MaxInFlight int
	// GlobalLimit bounds the calls at once across every instance of the
	// agent (each takes its share, GlobalLimit / instances, at least 1);
	// 0 means none.
	GlobalLimit int
	// RateLimit bounds the calls started per period across every instance
	// of the agent (each takes its share, at least 1 per period): no
	// window of the period holds more, and an instance waits one period
	// after it starts. Every try counts. The instance keeps its window a
	// tenth of the period longer (5 ms to 100 ms), so that the service,
	// which sees each call a moment later, counts no more either. Nil means
	// none.
	RateLimit *protocol.RateLimit
	// Directory tells how many instances of the agent are live, to share
	// GlobalLimit and RateLimit; nil counts this one alone.
	Directory Directory
	// HangAfter is the calls' latency budget: when the oldest call in
	// flight has run longer, and no call has been answered meanwhile, the
	// instance is unhealthy and gives commands back. Default
	// agentruntime.DefaultHangAfter (2 s).
	HangAfter time.Duration
	// Instance names this instance in heartbeats and replies; default
	// hostname-pid-random/<name> (agentruntime.DefaultInstance).
	Instance string
	// HeartbeatEvery is the time between heartbeats on
	// protocol.AgentsTopic; default protocol.DefaultHeartbeatEvery.
	// Negative sends none: the scheduler then routes by task and applies
	// no capacity limit to the agent.
	HeartbeatEvery time.Duration
	// Breakers, when set, reports breakers the handler keeps itself (saga's
	// built-in HTTP agent keeps one per host): while one is open the
	// instance is unhealthy.
	Breakers func() BreakerState
	// HealthByTarget says the handler judges the health of each of its
	// targets itself, as saga's built-in HTTP agent does per host: calls
	// that hang do not make the instance unhealthy, and a
	// *agentruntime.CircuitOpenError with a Target gives the command back for
	// that target alone.
	HealthByTarget bool
	// PriorityAging is how long a command waits before it competes as if
	// it had the next higher priority (domain.AgedRank); default
	// domain.DefaultPriorityAging (2 s).
	PriorityAging time.Duration
	Logger        *slog.Logger
	// Clock tells the time; default time.Now. Tests may control it.
	Clock func() time.Time
	// KafkaOptions are extra franz-go options for the agent's clients
	// (TLS, SASL, ...).
	KafkaOptions []kgo.Opt
	// Producer, when set, is the Kafka client the agent produces its
	// replies, dead letters and heartbeats with, shared with other agents
	// of the program so that their records travel in the same batches; the
	// agent does not close it. Nil gives the agent a client of its own.
	Producer *kgo.Client
	// TracerProvider starts the span of each command; default the global
	// TracerProvider (which does nothing unless the program set one).
	TracerProvider trace.TracerProvider
}

// Validate reports every problem of the configuration.
func (c Config) Validate(name string) error {
	var errs error
	if len(c.Brokers) == 0 {
		errs = errors.CombineErrors(errs, errors.New("agent: Brokers is required"))
	}
	if name == "" || !validAgentName(name) {
		errs = errors.CombineErrors(errs, errors.Newf("agent: name %q must be 1 to 100 letters, digits, ., _ or - and start with a letter or digit", name))
	}
	if c.MaxInFlight < 0 || c.Capacity < 0 {
		errs = errors.CombineErrors(errs, errors.New("agent: Capacity must not be negative"))
	}
	if c.GlobalLimit < 0 || c.HangAfter < 0 {
		errs = errors.CombineErrors(errs, errors.New("agent: GlobalLimit and HangAfter must not be negative"))
	}
	if r := c.RateLimit; r != nil && (r.Calls < 1 || r.PeriodMillis < 1) {
		errs = errors.CombineErrors(errs, errors.New("agent: RateLimit needs at least 1 call and a period of at least 1ms"))
	}
	if c.PriorityAging < 0 {
		errs = errors.CombineErrors(errs, errors.New("agent: PriorityAging must not be negative"))
	}
	return errs
}

func validAgentName(name string) bool {
	w := &domain.Workflow{Name: "w", Steps: []domain.StepDefinition{{Name: "s", Agent: name, Budget: time.Second, MaxAttempts: 1}}}
	return w.Validate() == nil
}

// Agent serves the commands of one agent name.
type Agent struct {
	name    string
	cfg     Config
	runtime *agentruntime.Agent
	// client is the producer client the agent made, closed when Run
	// returns; nil when Config.Producer lent one.
	client *kgo.Client
}

// New returns an agent serving name with handler; Run starts it.
func New(name string, handler Handler, cfg Config) (*Agent, error) {
	if err := cfg.Validate(name); err != nil {
		return nil, err
	}
	if cfg.Group == "" {
		cfg.Group = "saga-agent-" + name
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = cfg.MaxInFlight
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = agentruntime.DefaultAgentCapacity
	}
	if cfg.Instance == "" {
		cfg.Instance = agentruntime.DefaultInstance(name)
	}
	client, owned := cfg.Producer, false
	if client == nil {
		var err error
		if client, err = kafka.NewClient(cfg.Brokers, cfg.KafkaOptions...); err != nil {
			return nil, err
		}
		owned = true
	}
	producer := kafka.NewProducer(client, "saga/agent/"+name, cfg.Logger)
	rt := &agentruntime.Agent{Name: name, Replies: producer, DeadLetters: producer, Clock: processes.ClockFunc(cfg.Clock), Logger: cfg.Logger,
		Backoff: cfg.Backoff, Handler: adapt(handler), Tracing: cfg.TracerProvider, Instance: cfg.Instance, Capacity: cfg.Capacity,
		Aging: cfg.PriorityAging, GlobalLimit: cfg.GlobalLimit, RateLimit: cfg.RateLimit, Directory: cfg.Directory, HangAfter: cfg.HangAfter,
		Breakers: cfg.Breakers, HealthByTarget: cfg.HealthByTarget, HeartbeatEvery: max(cfg.HeartbeatEvery, 0)}
	if cfg.HeartbeatEvery >= 0 {
		rt.Heartbeats = kafka.NewHeartbeats(client, "saga/agent/"+name)
	}
	if cfg.BreakerOpenFor >= 0 {
		openFor := cfg.BreakerOpenFor
		if openFor == 0 {
			openFor = 2 * time.Second
		}
		rt.Breaker = agentruntime.NewBreaker(openFor, processes.ClockFunc(cfg.Clock))
	}
	if err := rt.Validate(); err != nil {
		if owned {
			client.Close()
		}
		return nil, err
	}
	a := &Agent{name: name, cfg: cfg, runtime: rt}
	if owned {
		a.client = client
	}
	return a, nil
}

// adapt turns a Handler into the agent runtime's step handler.
func adapt(h Handler) agentruntime.StepHandler {
	return func(ctx context.Context, cmd protocol.ExecuteStep) (json.RawMessage, error) {
		result, err := h(ctx, RequestOf(cmd))
		if err != nil {
			return nil, err
		}
		switch r := result.(type) {
		case nil:
			return nil, nil
		case json.RawMessage:
			return r, nil
		}
		raw, err := json.Marshal(result)
		if err != nil {
			return nil, Permanent(errors.Wrap(err, "encode the handler's result"))
		}
		return raw, nil
	}
}

// TraceParent returns the W3C traceparent of the span ctx carries, "" when
// it carries none. In a handler it names the agent's span of the command:
// send it as the traceparent header of the handler's calls so that the
// remote service continues the order's trace.
func TraceParent(ctx context.Context) string { return processes.TraceParentOf(ctx) }

// Name is the agent's name.
func (a *Agent) Name() string { return a.name }

// Group is the Kafka consumer group the agent consumes in.
func (a *Agent) Group() string { return a.cfg.Group }

// Instance names this instance in heartbeats and replies.
func (a *Agent) Instance() string { return a.cfg.Instance }

// Health returns the instance's health (protocol.HealthHealthy, ...) and,
// when it is not healthy, why.
func (a *Agent) Health() (health, reason string) { return a.runtime.Health() }

// Heartbeat returns what the instance announces about itself now.
func (a *Agent) Heartbeat() protocol.AgentHeartbeat { return a.runtime.Heartbeat() }

// Run serves commands until ctx ends, then lets the calls in flight finish
// (their replies are sent; a command not finished is redelivered to another
// instance) and returns. It announces the instance with heartbeats while it
// runs, stopping while it drains, and a tombstone once it has. It returns
// an error only if it cannot start.
func (a *Agent) Run(ctx context.Context) error {
	if a.client != nil {
		defer a.client.Close()
	}
	return a.runtime.Run(ctx, func(ctx context.Context) error {
		return kafka.Consume(ctx, kafka.ConsumerConfig{Brokers: a.cfg.Brokers, Group: a.cfg.Group,
			Topics: protocol.CommandTopics(a.name), MaxInFlight: 2*a.cfg.Capacity + 16, Logger: a.cfg.Logger, Opts: a.cfg.KafkaOptions,
			Band: func(topic string) domain.Priority { return protocol.CommandTopicPriority(a.name, topic) }, Aging: a.cfg.PriorityAging, Now: a.cfg.Clock,
			OnAssigned: a.runtime.Assigned, OnRevoking: a.runtime.Revoked},
			a.runtime.HandleCommand)
	})
}

// Execute runs a command handed over inside the process by a scheduler
// that chose this instance, rather than consumed from Kafka, and gives its
// reply to replies (falling back to Kafka when replies fails): saga's own
// process hands its agents their commands so, without the two Kafka hops
// of each step. Everything else is as for a consumed command: Capacity,
// health, retries, the deadline, the span. It returns an error only when
// ctx ended or no reply could be sent; the scheduler then sends the command
// again after a restart, or retries it once its complete-by passes.
func (a *Agent) Execute(ctx context.Context, cmd protocol.ExecuteStep, replies processes.ReplySender) error {
	return a.runtime.Execute(ctx, cmd, replies)
}

// Stats counts what the agent did.
type Stats struct {
	// Succeeded and Failed count replies sent; Returned counts commands
	// given back (outcome unavailable) without a call; Expired counts
	// commands that arrived or ended past their deadline (no reply);
	// Retries counts calls retried inside a deadline; Tries counts calls
	// made; Rejected counts malformed commands dead-lettered;
	// BreakerOpened counts how often the breaker opened.
	Succeeded, Failed, Returned, Expired, Retries, Tries, Rejected, BreakerOpened int64
}

// Stats returns the agent's counters.
func (a *Agent) Stats() Stats {
	s := a.runtime.Stats()
	out := Stats{Succeeded: s.Succeeded, Failed: s.Failed, Returned: s.Returned, Expired: s.Expired, Retries: s.Retries, Tries: s.Tries,
		Rejected: s.Rejected}
	if a.runtime.Breaker != nil {
		out.BreakerOpened = a.runtime.Breaker.Opened()
	}
	return out
}

// WriteMetrics writes the agent's counters in the Prometheus text format,
// under the names sagad uses (saga_agent_*), for a program that serves its
// own /metrics.
func (a *Agent) WriteMetrics(w io.Writer) {
	s := a.Stats()
	fmt.Fprintf(w, "# HELP saga_agent_commands_total Commands agents finished, by outcome.\n# TYPE saga_agent_commands_total counter\n")
	for _, o := range []struct {
		outcome string
		n       int64
	}{{"succeeded", s.Succeeded}, {"failed", s.Failed}, {"unavailable", s.Returned}, {"expired", s.Expired}, {"dead_lettered", s.Rejected}} {
		fmt.Fprintf(w, "saga_agent_commands_total{agent=%q,outcome=%q} %d\n", a.name, o.outcome, o.n)
	}
	fmt.Fprintf(w, "# HELP saga_agent_retries_total Calls agents retried within a command's deadline.\n# TYPE saga_agent_retries_total counter\n")
	fmt.Fprintf(w, "saga_agent_retries_total{agent=%q} %d\n", a.name, s.Retries)
	fmt.Fprintf(w, "# HELP saga_agent_tries_total Calls agents made to their services.\n# TYPE saga_agent_tries_total counter\n")
	fmt.Fprintf(w, "saga_agent_tries_total{agent=%q} %d\n", a.name, s.Tries)
	fmt.Fprintf(w, "# HELP saga_agent_breaker_opened_total Times an agent's circuit breaker opened.\n# TYPE saga_agent_breaker_opened_total counter\n")
	fmt.Fprintf(w, "saga_agent_breaker_opened_total{agent=%q} %d\n", a.name, s.BreakerOpened)
}

// Run serves name's commands with handler until ctx ends (New, then
// Agent.Run).
func Run(ctx context.Context, cfg Config, name string, handler Handler) error {
	a, err := New(name, handler, cfg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
