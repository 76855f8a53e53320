package processes

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
)

// DefaultMaxOrderSize bounds an order message body.
const DefaultMaxOrderSize = 1 << 20

// Submitter turns order messages into tasks: it appends TaskSubmitted to the
// order's new task stream. Invalid orders go to the dead letters with the
// reason. A duplicate order (its stream exists) is acknowledged and does not
// start a second task.
type Submitter struct {
	Store       EventStore
	DeadLetters DeadLetters
	Catalog     domain.Catalog
	Actor       string
	Clock       Clock
	Logger      *slog.Logger
	// MaxOrderSize bounds an order's body; default DefaultMaxOrderSize.
	MaxOrderSize int

	accepted, duplicates, rejected atomic.Int64
}

// SubmitterStats counts what the submitter did.
type SubmitterStats struct{ Accepted, Duplicates, Rejected int64 }

// Stats returns the submitter's counters.
func (s *Submitter) Stats() SubmitterStats {
	return SubmitterStats{s.accepted.Load(), s.duplicates.Load(), s.rejected.Load()}
}

// HandleOrder processes one order message. It returns an error only when the
// message could be neither stored nor dead-lettered, so that the consumer
// retries it and nothing is lost.
func (s *Submitter) HandleOrder(ctx context.Context, msg Inbound) error {
	maxSize := s.MaxOrderSize
	if maxSize == 0 {
		maxSize = DefaultMaxOrderSize
	}
	order, err := domain.ParseOrder(msg.Value, maxSize)
	if err != nil {
		return s.reject(ctx, msg, err)
	}
	wf, err := s.Catalog.Lookup(order.Workflow)
	if err != nil {
		return s.reject(ctx, msg, err)
	}
	trace := msg.Headers["traceparent"]
	if trace == "" {
		trace = NewTraceParent()
	}
	submitted := domain.Submit(order, wf, trace, s.Clock())
	data, err := domain.EncodeEvent(submitted)
	if err != nil {
		return s.reject(ctx, msg, err)
	}
	meta := domain.EventMetadata{CorrelationID: order.OrderID, CausationID: causation(msg), Actor: s.Actor, TraceParent: trace}
	_, err = s.Store.Append(ctx, domain.TaskStream(order.OrderID), domain.ExpectNoStream(),
		domain.NewEvent{Type: submitted.EventType(), Data: data, Metadata: meta})
	switch {
	case errors.Is(err, domain.ErrConcurrencyConflict):
		s.duplicates.Add(1)
		s.Logger.Info("duplicate order acknowledged", "order", order.OrderID, "source", msg.Source())
		return nil
	case err != nil:
		return errors.Wrapf(err, "submit order %s", order.OrderID)
	}
	s.accepted.Add(1)
	return nil
}

func (s *Submitter) reject(ctx context.Context, msg Inbound, reason error) error {
	s.rejected.Add(1)
	s.Logger.Warn("order rejected to dead letters", "source", msg.Source(), "reason", reason.Error())
	return errors.Wrap(s.DeadLetters.DeadLetter(ctx, msg, reason.Error()), "dead-letter rejected order")
}

// causation is the id of the message that caused an event: its CloudEvents
// id when it has one, else its place in the log.
func causation(msg Inbound) string {
	if id := msg.Headers["ce_id"]; id != "" {
		return id
	}
	return msg.Source()
}
