package agentruntime

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/internal/tracing"
	"github.com/sagaengine/saga/processes/port"
)

// ErrPermanent marks a failure that retrying cannot fix: the remote service
// refused the request for good. Wrap it with Permanent.
var ErrPermanent = errors.New("permanent failure")

// Permanent marks err as a failure retrying cannot fix.
func Permanent(err error) error { return permanentError{err} }

type permanentError struct{ err error }

func (p permanentError) Error() string        { return p.err.Error() }
func (p permanentError) Unwrap() error        { return p.err }
func (p permanentError) Is(target error) bool { return target == ErrPermanent }

// StepHandler carries out one command against a remote service. It must
// send cmd.IdempotencyKey with the call, so that a repeated command has no
// second effect, and stop when ctx ends (at the command's CompleteBy). It
// returns Permanent(err) when retrying cannot help; any other error is
// retried.
type StepHandler func(ctx context.Context, cmd protocol.ExecuteStep) (json.RawMessage, error)

// Agent runs commands of one agent topic: each within its CompleteBy,
// retrying transient failures with backoff and jitter, and replying to the
// scheduler. An agent never replies once CompleteBy has passed; when retries
// would run past it, it replies a transient failure while it still can, so
// the scheduler may try again.
//
// An agent instance makes at most Capacity calls at once (and its share
// of GlobalLimit and RateLimit); commands past it wait, higher priority
// first. It knows its health (see Health) and gives back, without calling
// its service, the commands it cannot carry out: it replies
// protocol.OutcomeUnavailable with the reason, and the attempt does not
// count. Run announces it with heartbeats.
type Agent struct {
	Name        string
	Handler     StepHandler
	Replies     port.ReplySender
	DeadLetters port.DeadLetters
	Clock       port.Clock
	Logger      *slog.Logger
	// Backoff spaces retries; default port.DefaultBackoff.
	Backoff domain.Backoff
	// Breaker guards the remote service; nil means none.
	Breaker *Breaker
	// Breakers, when set, reports the breakers the handler keeps itself
	// (the built-in HTTP agent keeps one per host): the instance is
	// unhealthy while one is open.
	Breakers func() BreakerState
	// HealthByTarget says the handler judges the health of each of its
	// targets itself (the built-in HTTP agent, per host): the instance does
	// not turn unhealthy when calls hang, and the handler refuses calls to
	// a target that hangs or fails with a CircuitOpenError naming it, which
	// gives the command back for that target alone.
	HealthByTarget bool
	// Tracing starts the span of each command (SpanAgent), the parent of
	// the handler's calls; nil means the global TracerProvider.
	Tracing trace.TracerProvider

	// Instance names this instance in replies and heartbeats; default a
	// name unique to the process and agent (DefaultInstance).
	Instance string
	// Capacity bounds the handler's calls at once; default
	// DefaultAgentCapacity. Commands past it wait, the best
	// domain.AgedRank of priority and time waited first.
	Capacity int
	// Aging is the aging interval of that rank; default
	// domain.DefaultPriorityAging.
	Aging time.Duration
	// GlobalLimit bounds the calls at once across every instance of the
	// agent: this one takes GlobalLimit / k of them (at least one), k the
	// live instances Directory knows. 0 means no bound.
	GlobalLimit int
	// RateLimit bounds the calls started per period across every instance:
	// this one starts at most Calls / k (at least one) in any window of
	// the period (kept a little longer, rateMargin), and waits one period
	// after it starts. Every try counts.
	RateLimit *protocol.RateLimit
	// Directory tells how many instances share the limits; nil means this
	// one alone.
	Directory port.AgentDirectory
	// HangAfter is the calls' latency budget: once the oldest call in
	// flight has run longer, and no call finished meanwhile, the calls
	// hang and the instance is unhealthy. Default DefaultHangAfter.
	HangAfter time.Duration
	// OpenFor is how long an instance whose calls hang stays unhealthy
	// before a trial; default the Breaker's OpenFor, else
	// DefaultHealthOpenFor.
	OpenFor time.Duration
	// Heartbeats announce the instance while Run runs; nil means none.
	Heartbeats port.Heartbeats
	// HeartbeatEvery is the time between heartbeats; default
	// protocol.DefaultHeartbeatEvery.
	HeartbeatEvery time.Duration

	succeeded, failed, expired, retries, rejected, returned, tries atomic.Int64

	setupOnce sync.Once
	kick      chan struct{}
	mu        sync.Mutex
	st        agentState
}

// AgentStats counts what an agent did: replies that succeeded, failed and
// gave the command back (Returned), commands dropped past their deadline,
// retries, malformed commands, and calls made (Tries).
type AgentStats struct {
	Succeeded, Failed, Expired, Retries, Rejected, Returned, Tries int64
}

// Stats returns the agent's counters.
func (a *Agent) Stats() AgentStats {
	return AgentStats{a.succeeded.Load(), a.failed.Load(), a.expired.Load(), a.retries.Load(), a.rejected.Load(),
		a.returned.Load(), a.tries.Load()}
}

// HandleCommand runs one command message. It returns an error only when the
// message should be redelivered (the process is stopping, or a reply or
// dead letter could not be written). Its span (SpanAgent) is a child of the
// dispatch's and the parent of the reply's handling; the handler's context
// carries it, so that the handler's calls continue the trace.
func (a *Agent) HandleCommand(ctx context.Context, msg port.Inbound) (err error) {
	a.setup()
	ctx, span := tracing.ConsumerSpan(ctx, tracing.Tracer(a.Tracing), tracing.SpanAgent, msg)
	defer func() { tracing.EndSpan(span, err) }()
	cmd, err := protocol.ParseExecuteStep(msg.Value)
	if err != nil {
		a.rejected.Add(1)
		tracing.FailSpan(span, err)
		a.Logger.Warn("command rejected to dead letters", "agent", a.Name, "source", msg.Source(), "reason", err.Error())
		return errors.Wrap(a.DeadLetters.DeadLetter(ctx, msg, err.Error()), "dead-letter command")
	}
	cmd.TraceParent = msg.Headers.Get(protocol.HeaderTraceParent)
	return a.run(ctx, cmd)
}

// Execute runs a command handed over inside the process, by a scheduler
// that chose this instance, rather than consumed from its topic: as
// HandleCommand, without the encoding, and its reply goes to replies. When
// replies fails, the reply goes to Replies as any other. It returns an
// error only when the process is stopping or no reply could be sent; the
// command is then sent again after a restart, or retried once its
// CompleteBy passes, as one lost in Kafka would be.
func (a *Agent) Execute(ctx context.Context, cmd protocol.ExecuteStep, replies port.ReplySender) (err error) {
	a.setup()
	topic := protocol.CommandTopicFor(cmd.Agent, cmd.Priority)
	ctx, span := tracing.ConsumerSpan(ctx, tracing.Tracer(a.Tracing), tracing.SpanAgent, port.InProcessMessage(topic, cmd.TaskID, cmd.TraceParent))
	defer func() { tracing.EndSpan(span, err) }()
	return a.run(context.WithValue(ctx, inProcessReplies{}, replies), cmd)
}

// inProcessReplies is the context key of the ReplySender of a command
// handed over inside the process (Execute).
type inProcessReplies struct{}

// run carries out a decoded command under its span.
func (a *Agent) run(ctx context.Context, cmd protocol.ExecuteStep) error {
	span := trace.SpanFromContext(ctx)
	tracing.SetAttributes(span, func() []attribute.KeyValue {
		return []attribute.KeyValue{tracing.AttrAgent.String(a.Name), tracing.AttrTaskID.String(cmd.TaskID), tracing.AttrWorkflow.String(cmd.Workflow),
			tracing.AttrStep.String(cmd.Step), tracing.AttrAction.String(cmd.Action), tracing.AttrAttempt.Int(cmd.Attempt)}
	})
	if !a.Clock.Now().Before(cmd.CompleteBy) {
		a.expired.Add(1)
		span.SetAttributes(tracing.AttrOutcome.String(outcomeExpired))
		a.log(ctx, cmd).Info("command past its complete-by dropped")
		return nil
	}
	// Keep back part of the budget to report a failure before CompleteBy.
	reserve := min(max(cmd.CompleteBy.Sub(a.Clock.Now())/10, 20*time.Millisecond), 500*time.Millisecond)
	pass, err := a.enter(ctx, cmd, cmd.CompleteBy.Add(-reserve))
	if err != nil {
		return err
	}
	if !pass.admitted {
		return a.giveBack(ctx, cmd, pass.reason)
	}
	succeeded := false
	defer func() { a.leave(pass, succeeded) }()
	return a.attempt(ctx, cmd, reserve, &succeeded)
}

// attempt carries out an admitted command: calls, retries, and the reply.
func (a *Agent) attempt(ctx context.Context, cmd protocol.ExecuteStep, reserve time.Duration, succeeded *bool) error {
	span := trace.SpanFromContext(ctx)
	callCtx, cancel := context.WithDeadline(ctx, cmd.CompleteBy)
	defer cancel()
	backoff := a.Backoff
	if backoff.Initial == 0 {
		backoff = port.DefaultBackoff
	}
	tries := 0
	var cause error // the last failure that was not a refusal
	for {
		if reason, ok := a.awaitRate(ctx, cmd.CompleteBy.Add(-reserve)); !ok {
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case tries == 0:
				return a.giveBack(ctx, cmd, reason)
			}
			return a.reply(ctx, cmd, protocol.StepReply{Outcome: protocol.OutcomeFailed, Failure: domain.FailureTransient, Tries: tries,
				Reason: "gave up after " + strconv.Itoa(tries) + " tries: " + cause.Error() + " (then: " + reason + ")"})
		}
		result, called, err := a.call(callCtx, cmd)
		if called {
			tries++
			span.SetAttributes(tracing.AttrTries.Int(tries))
		}
		switch {
		case err == nil:
			*succeeded = true
			return a.reply(ctx, cmd, protocol.StepReply{Outcome: protocol.OutcomeSucceeded, Result: result, Tries: tries})
		case ctx.Err() != nil:
			return ctx.Err() // stopping: the command is redelivered after restart
		case errors.Is(err, ErrPermanent):
			*succeeded = true // the service answered
			return a.reply(ctx, cmd, protocol.StepReply{Outcome: protocol.OutcomeFailed, Failure: domain.FailurePermanent, Reason: err.Error(), Tries: tries})
		case !called && tries == 0:
			// Refused before any call: give the attempt back.
			return a.reply(ctx, cmd, protocol.StepReply{Outcome: protocol.OutcomeUnavailable, Reason: refusalCause(err), Target: refusedTarget(err)})
		case !called:
			// Calls failed, then the breaker refused: name what went
			// wrong, not the refusal.
			return a.reply(ctx, cmd, protocol.StepReply{Outcome: protocol.OutcomeFailed, Failure: domain.FailureTransient, Tries: tries,
				Reason: "gave up after " + strconv.Itoa(tries) + " tries: " + cause.Error() + " (the service is unhealthy)"})
		}
		cause = err
		pause := port.Wait(backoff, tries)
		var hinted interface{ RetryAfter() time.Duration }
		if errors.As(err, &hinted) {
			// The service said when to come back (Retry-After).
			pause = max(pause, hinted.RetryAfter())
		}
		if a.Clock.Now().Add(pause).After(cmd.CompleteBy.Add(-reserve)) {
			return a.reply(ctx, cmd, protocol.StepReply{Outcome: protocol.OutcomeFailed, Failure: domain.FailureTransient, Tries: tries,
				Reason: "gave up after " + strconv.Itoa(tries) + " tries: " + err.Error()})
		}
		a.retries.Add(1)
		span.AddEvent("retry", trace.WithAttributes(tracing.AttrTries.Int(tries), tracing.AttrReason.String(err.Error()), attribute.String("saga.pause", pause.String())))
		if !port.Sleep(ctx, a.Clock, pause) {
			return ctx.Err()
		}
	}
}

// refusalCause is the root cause a breaker's refusal carries, or the
// refusal itself.
func refusalCause(err error) string {
	var open *CircuitOpenError
	if errors.As(err, &open) && open.Cause != "" {
		return open.Cause
	}
	return err.Error()
}

// refusedTarget is the target a refusal names, when the handler refused
// one target rather than every call.
func refusedTarget(err error) string {
	var open *CircuitOpenError
	if errors.As(err, &open) {
		return open.Target
	}
	return ""
}

// outcomeExpired is the agent span's outcome for a command it dropped or
// did not answer because its complete-by had passed.
const outcomeExpired = "expired"

// call runs the handler through the circuit breaker. It reports whether a
// call was made: not when a breaker (the agent's or the handler's own)
// refused it.
func (a *Agent) call(ctx context.Context, cmd protocol.ExecuteStep) (json.RawMessage, bool, error) {
	if a.Breaker != nil {
		if err := a.Breaker.Allow(); err != nil {
			return nil, false, err
		}
	}
	c := a.callStarted()
	result, err := a.handle(ctx, cmd)
	refused := errors.Is(err, ErrCircuitOpen)
	// Counted before the breaker hears of it: a breaker that opens on this
	// call makes Run announce the health change at once, with the counts.
	if !refused {
		a.tries.Add(1)
	}
	if a.Breaker != nil {
		a.Breaker.Record(err)
	}
	a.callEnded(c, err, refused, ctx.Err() == nil)
	return result, !refused, err
}

// handle runs the handler, turning a panic into a permanent failure: a
// command that makes the handler panic would do so again on every retry
// and redelivery, and take the process down each time, so its step fails
// (and compensates as its policy says) instead.
func (a *Agent) handle(ctx context.Context, cmd protocol.ExecuteStep) (result json.RawMessage, err error) {
	defer func() {
		if v := recover(); v != nil {
			a.log(ctx, cmd).Error("step handler panicked; the step fails for good", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			result, err = nil, Permanent(errors.Newf("the handler panicked: %v", v))
		}
	}()
	return a.Handler(ctx, cmd)
}

// log returns the logger of lines about a command.
func (a *Agent) log(ctx context.Context, cmd protocol.ExecuteStep) *slog.Logger {
	return tracing.TaskLogger(ctx, a.Logger, cmd.TaskID).With("agent", a.Name, "step", cmd.Step, "attempt", cmd.Attempt)
}

// giveBack replies that the instance gives the command back without
// calling its service (protocol.OutcomeUnavailable).
func (a *Agent) giveBack(ctx context.Context, cmd protocol.ExecuteStep, reason string) error {
	return a.reply(ctx, cmd, protocol.StepReply{Outcome: protocol.OutcomeUnavailable, Reason: reason})
}

func (a *Agent) reply(ctx context.Context, cmd protocol.ExecuteStep, r protocol.StepReply) error {
	span := trace.SpanFromContext(ctx)
	if !a.Clock.Now().Before(cmd.CompleteBy) {
		a.expired.Add(1)
		span.SetAttributes(tracing.AttrOutcome.String(outcomeExpired))
		a.log(ctx, cmd).Info("complete-by passed; staying silent")
		return nil
	}
	r.TaskID, r.Step, r.Action, r.Attempt, r.Agent, r.Instance = cmd.TaskID, cmd.Step, cmd.Action, cmd.Attempt, a.Name, a.Instance
	r.TraceParent = tracing.OutgoingTraceParent(ctx, cmd.TraceParent)
	span.SetAttributes(tracing.AttrOutcome.String(r.Outcome))
	if r.Outcome != protocol.OutcomeSucceeded {
		span.SetAttributes(tracing.AttrReason.String(r.Reason))
	}
	if r.Outcome == protocol.OutcomeFailed {
		span.SetStatus(codes.Error, string(r.Failure)+": "+r.Reason)
	}
	if err := a.sendReply(ctx, r); err != nil {
		return errors.Wrapf(err, "reply for %s/%s attempt %d", cmd.TaskID, cmd.Step, cmd.Attempt)
	}
	switch r.Outcome {
	case protocol.OutcomeSucceeded:
		a.succeeded.Add(1)
	case protocol.OutcomeUnavailable:
		a.returned.Add(1)
		a.log(ctx, cmd).Debug("command given back", "reason", r.Reason)
	default:
		a.failed.Add(1)
	}
	return nil
}

// sendReply sends r to the scheduler: inside the process when its command
// came so (Execute), falling back to Replies when that fails while the
// process still runs.
func (a *Agent) sendReply(ctx context.Context, r protocol.StepReply) error {
	if direct, ok := ctx.Value(inProcessReplies{}).(port.ReplySender); ok && direct != nil {
		err := direct.SendReply(ctx, r)
		if err == nil || ctx.Err() != nil {
			return err
		}
		tracing.TaskLogger(ctx, a.Logger, r.TaskID).Warn("in-process reply failed; sending it the usual way",
			"agent", a.Name, "step", r.Step, "attempt", r.Attempt, "err", err.Error())
	}
	return a.Replies.SendReply(ctx, r)
}
