package processes

import (
	"container/heap"
	"context"
	"time"

	"github.com/cockroachdb/errors"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes/internal/tracing"
)

// delayTimer is a delay step waiting until at: the supervisor's timer
// index holds one per StepDelayed, and rebuilds it from the tasks it
// reads at start (fileDelays). One whose step fired or whose task moved on
// is dropped when it surfaces.
type delayTimer struct {
	at           time.Time
	taskID, step string
}

func (d delayTimer) dueAt() time.Time { return d.at }

// fileDelays indexes the delay steps of a task read from its stream. The
// caller holds mu.
func (s *Supervisor) fileDelays(t *domain.Task) {
	for _, d := range t.Delays() {
		heap.Push(&s.timers, delayTimer{at: d.Until, taskID: t.ID, step: d.Step})
	}
}

// pruneTimers drops the timers of tasks no longer tracked once they are
// most of the index, as pruneDeadlines does. The caller holds mu.
func (s *Supervisor) pruneTimers() {
	if len(s.timers) < minPrune || len(s.timers) < 4*len(s.tasks) {
		return
	}
	kept := s.timers[:0]
	for _, d := range s.timers {
		if s.tasks[d.taskID] != nil {
			kept = append(kept, d)
		}
	}
	clear(s.timers[len(kept):])
	s.timers = kept
	heap.Init(&s.timers)
}

// dueDelay is a timer that fell due, with the task as the supervisor
// knows it.
type dueDelay struct {
	task  *domain.Task
	timer delayTimer
}

// dueTimers takes from the index the timers whose time has come by the
// supervisor's clock (never one before: no grace is taken off) and whose
// step still waits on them. The caller holds mu.
func (s *Supervisor) dueTimers(now time.Time) []dueDelay {
	var due []dueDelay
	for len(s.timers) > 0 && !s.timers[0].at.After(now) {
		d := heap.Pop(&s.timers).(delayTimer)
		t := s.tasks[d.taskID]
		if t == nil {
			continue
		}
		if st := t.Step(d.step); st == nil || st.State != domain.StepStateDelayed || st.DelayedUntil == nil || !st.DelayedUntil.Equal(d.at) {
			continue // fired already, or the task moved on
		}
		due = append(due, dueDelay{task: t.Clone(), timer: d})
	}
	return due
}

// requeueTimers puts back timers a scan did not get to. The caller holds
// mu.
func (s *Supervisor) requeueTimers(due []dueDelay) {
	for _, d := range due {
		heap.Push(&s.timers, d.timer)
	}
}

// fireDelays fires the delay steps that fell due, asking before each
// whether the supervisor still leads; what it does not get to goes back
// for the next scan. It reports whether the scan may go on.
func (s *Supervisor) fireDelays(ctx context.Context, due []dueDelay, now time.Time) bool {
	for i, d := range due {
		if ctx.Err() != nil || s.storeSilent || !s.stillLeads() {
			s.mu.Lock()
			s.requeueTimers(due[i:])
			s.mu.Unlock()
			return false
		}
		s.fireDelay(ctx, d, now)
	}
	return true
}

// fireDelay records that a delay step's time came (StepDelayElapsed, in
// the supervisor's lease term) on the task's revision, so that two
// supervisors never both fire it; the scheduler then goes on with the
// task.
func (s *Supervisor) fireDelay(ctx context.Context, due dueDelay, now time.Time) {
	t, d := due.task, due.timer
	known := t.Revision
	ctx, span := tracing.Tracer(s.Tracing).Start(tracing.WithTraceParent(ctx, t.TraceParent), SpanDelay, trace.WithAttributes(AttrTaskID.String(t.ID),
		AttrWorkflow.String(t.Workflow), AttrStep.String(d.step)))
	defer span.End()
	log := tracing.TaskLogger(ctx, s.Logger, t.ID)
	meta := domain.EventMetadata{CausationID: "delay/" + d.step, Actor: s.Actor, TraceParent: tracing.StoredTraceParent(ctx)}
	term := s.term.Load()
	bounded, cancel := context.WithTimeout(ctx, s.storeTimeout)
	defer cancel()
	u, err := s.repo.Update(bounded, t.ID, t, meta, func(t *domain.Task) ([]domain.Event, error) {
		return t.ElapseDelayInTerm(d.step, d.at, term, domain.Decision{Now: now, Actor: s.Actor})
	})
	s.conflicts.Add(int64(u.Conflicts))
	requeue := func() {
		s.mu.Lock()
		heap.Push(&s.timers, d)
		s.mu.Unlock()
	}
	switch {
	case errors.Is(err, domain.ErrStaleLeaseTerm):
		s.staleTerms.Add(1)
		span.SetAttributes(AttrOutcome.String("stale lease term"))
		log.Warn("supervisor delay refused: a newer lease term acted on the task", "step", d.step, "lease_term", term, "err", err.Error())
		requeue()
		return
	case errors.Is(err, domain.ErrNotDelayed), err == nil && len(u.Events) == 0:
		span.SetAttributes(AttrOutcome.String("fired already"))
		return
	case errors.Is(err, domain.ErrNotDue):
		// Only a clock that went back gets here: look again later.
		span.SetAttributes(AttrOutcome.String("not due"))
		requeue()
		return
	case err != nil:
		tracing.FailSpan(span, err)
		if ctx.Err() == nil {
			log.Error("supervisor delay", "step", d.step, "err", err.Error())
		}
		if bounded.Err() != nil {
			s.storeSilent = true
		}
		requeue()
		return
	}
	s.delaysElapsed.Add(1)
	span.SetAttributes(AttrOutcome.String(domain.StepDelayElapsedType))
	log.Info("delay elapsed", "step", d.step, "until", d.at.UTC().Format(time.RFC3339Nano), "lease_term", term)
	if u.Read {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.tasks[t.ID]; cur != nil && cur.Revision == known {
		for _, e := range u.Events {
			cur.Apply(e)
			s.track(cur, e)
		}
	}
}
