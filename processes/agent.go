package processes

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
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
type Agent struct {
	Name        string
	Handler     StepHandler
	Replies     ReplySender
	DeadLetters DeadLetters
	Clock       Clock
	Logger      *slog.Logger
	// Backoff spaces retries; default DefaultBackoff.
	Backoff domain.Backoff
	// Breaker guards the remote service; nil means none.
	Breaker *Breaker
	// Tracing starts the span of each command (SpanAgent), the parent of
	// the handler's calls; nil means the global TracerProvider.
	Tracing trace.TracerProvider

	succeeded, failed, expired, retries, rejected atomic.Int64
}

// AgentStats counts what an agent did.
type AgentStats struct {
	Succeeded, Failed, Expired, Retries, Rejected int64
}

// Stats returns the agent's counters.
func (a *Agent) Stats() AgentStats {
	return AgentStats{a.succeeded.Load(), a.failed.Load(), a.expired.Load(), a.retries.Load(), a.rejected.Load()}
}

// HandleCommand runs one command message. It returns an error only when the
// message should be redelivered (the process is stopping, or a reply or
// dead letter could not be written). Its span (SpanAgent) is a child of the
// dispatch's and the parent of the reply's handling; the handler's context
// carries it, so that the handler's calls continue the trace.
func (a *Agent) HandleCommand(ctx context.Context, msg Inbound) (err error) {
	ctx, span := consumerSpan(ctx, tracer(a.Tracing), SpanAgent, msg)
	defer func() { endSpan(span, err) }()
	cmd, err := protocol.ParseExecuteStep(msg.Value)
	if err != nil {
		a.rejected.Add(1)
		failSpan(span, err)
		a.Logger.Warn("command rejected to dead letters", "agent", a.Name, "source", msg.Source(), "reason", err.Error())
		return errors.Wrap(a.DeadLetters.DeadLetter(ctx, msg, err.Error()), "dead-letter command")
	}
	cmd.TraceParent = msg.Headers[protocol.HeaderTraceParent]
	setAttributes(span, func() []attribute.KeyValue {
		return []attribute.KeyValue{AttrAgent.String(a.Name), AttrTaskID.String(cmd.TaskID), AttrWorkflow.String(cmd.Workflow),
			AttrStep.String(cmd.Step), AttrAction.String(cmd.Action), AttrAttempt.Int(cmd.Attempt)}
	})
	if !a.Clock.Now().Before(cmd.CompleteBy) {
		a.expired.Add(1)
		span.SetAttributes(AttrOutcome.String(outcomeExpired))
		a.log(ctx, cmd).Info("command past its complete-by dropped")
		return nil
	}
	callCtx, cancel := context.WithDeadline(ctx, cmd.CompleteBy)
	defer cancel()
	backoff := a.Backoff
	if backoff.Initial == 0 {
		backoff = DefaultBackoff
	}
	// Keep back part of the budget to report a failure before CompleteBy.
	reserve := min(max(cmd.CompleteBy.Sub(a.Clock.Now())/10, 20*time.Millisecond), 500*time.Millisecond)
	var cause error // the last failure that was not the breaker's refusal
	for try := 1; ; try++ {
		span.SetAttributes(AttrTries.Int(try))
		result, err := a.call(callCtx, cmd)
		if err != nil && !errors.Is(err, ErrCircuitOpen) {
			cause = err
		}
		switch {
		case err == nil:
			return a.reply(ctx, cmd, protocol.StepReply{Outcome: protocol.OutcomeSucceeded, Result: result})
		case ctx.Err() != nil:
			return ctx.Err() // stopping: the command is redelivered after restart
		case errors.Is(err, ErrPermanent):
			return a.reply(ctx, cmd, protocol.StepReply{Outcome: protocol.OutcomeFailed, Failure: domain.FailurePermanent, Reason: err.Error()})
		}
		pause := wait(backoff, try)
		var hinted interface{ RetryAfter() time.Duration }
		if errors.As(err, &hinted) {
			// The service said when to come back (Retry-After).
			pause = max(pause, hinted.RetryAfter())
		}
		if a.Clock.Now().Add(pause).After(cmd.CompleteBy.Add(-reserve)) {
			reason := "gave up after " + itoa(int64(try)) + " tries: " + err.Error()
			if cause != nil && errors.Is(err, ErrCircuitOpen) {
				// Name what went wrong, not only that the breaker then refused.
				reason = "gave up after " + itoa(int64(try)) + " tries: " + cause.Error() + " (then: " + err.Error() + ")"
			}
			return a.reply(ctx, cmd, protocol.StepReply{Outcome: protocol.OutcomeFailed, Failure: domain.FailureTransient, Reason: reason})
		}
		a.retries.Add(1)
		span.AddEvent("retry", trace.WithAttributes(AttrTries.Int(try), AttrReason.String(err.Error()), attribute.String("saga.pause", pause.String())))
		if !sleep(ctx, a.Clock, pause) {
			return ctx.Err()
		}
	}
}

// outcomeExpired is the agent span's outcome for a command it dropped or
// did not answer because its complete-by had passed.
const outcomeExpired = "expired"

// call runs the handler through the circuit breaker.
func (a *Agent) call(ctx context.Context, cmd protocol.ExecuteStep) (json.RawMessage, error) {
	if a.Breaker == nil {
		return a.Handler(ctx, cmd)
	}
	if err := a.Breaker.Allow(); err != nil {
		return nil, err
	}
	result, err := a.Handler(ctx, cmd)
	a.Breaker.Record(err)
	return result, err
}

// log returns the logger of lines about a command.
func (a *Agent) log(ctx context.Context, cmd protocol.ExecuteStep) *slog.Logger {
	return taskLogger(ctx, a.Logger, cmd.TaskID).With("agent", a.Name, "step", cmd.Step, "attempt", cmd.Attempt)
}

func (a *Agent) reply(ctx context.Context, cmd protocol.ExecuteStep, r protocol.StepReply) error {
	span := trace.SpanFromContext(ctx)
	if !a.Clock.Now().Before(cmd.CompleteBy) {
		a.expired.Add(1)
		span.SetAttributes(AttrOutcome.String(outcomeExpired))
		a.log(ctx, cmd).Info("complete-by passed; staying silent")
		return nil
	}
	r.TaskID, r.Step, r.Action, r.Attempt, r.Agent = cmd.TaskID, cmd.Step, cmd.Action, cmd.Attempt, a.Name
	r.TraceParent = outgoingTraceParent(ctx, cmd.TraceParent)
	span.SetAttributes(AttrOutcome.String(r.Outcome))
	if r.Outcome == protocol.OutcomeFailed {
		span.SetAttributes(AttrReason.String(r.Reason))
		span.SetStatus(codes.Error, string(r.Failure)+": "+r.Reason)
	}
	if err := a.Replies.SendReply(ctx, r); err != nil {
		return errors.Wrapf(err, "reply for %s/%s attempt %d", cmd.TaskID, cmd.Step, cmd.Attempt)
	}
	if r.Outcome == protocol.OutcomeSucceeded {
		a.succeeded.Add(1)
	} else {
		a.failed.Add(1)
	}
	return nil
}
