package processes

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// StatusPublisher turns every task event into a status message for the
// order's reply topic and for saga.status. It follows the store from a
// checkpoint: it publishes, waits until the broker has everything up to a
// position, then saves that position. Delivery is at least once; after a
// crash the messages since the last checkpoint are sent again, with the same
// revisions, so consumers can drop them.
//
// With Alerts it also resolves alerts: for the event that takes a task out
// of Error (an operator's retry or cancel) it sends a resolved alert
// (protocol.ResolvedAlert), waiting until it is delivered before it goes
// on, so the checkpoint never passes an event whose resolved alert was
// lost. Like statuses they are at least once, with the event's revision.
// The supervisor raises alerts; the publisher resolves them because
// leaving Error is one event, and the publisher is what turns every event
// into messages from a checkpoint.
//
// With Retention it also gives each task that finishes the $maxAge its
// workflow's retention asks for, and waits for those limits before its
// checkpoint passes the task's end, as it waits for the statuses.
type StatusPublisher struct {
	Store       EventStore
	Checkpoints Checkpoints
	Sink        StatusSink
	// Alerts, when set, receives a resolved alert for every task that
	// leaves Error.
	Alerts Alerts
	// Retention, when set, limits the streams of the tasks that finish
	// as their workflows' retention says.
	Retention *FinishedTaskRetention
	Logger    *slog.Logger
	// Name keys the checkpoint; publishers with one name share it.
	Name string
	// CheckpointEvery bounds the time between checkpoints. Default
	// DefaultStatusCheckpointEvery.
	CheckpointEvery time.Duration

	tasks                        map[string]*domain.Task
	heldTasks                    atomic.Int64
	published, skipped, resolved atomic.Int64
	// finished are the reply topics of the tasks that finished since the
	// last checkpoint, for a ReplyTopicForgetter sink.
	finished map[string]struct{}
}

// Held is what the publisher holds in memory: the tasks it folds, those
// unfinished (a task in Error included, until it is resolved).
func (p *StatusPublisher) Held() Held { return Held{"tasks": int(p.heldTasks.Load())} }

// Resolved counts the resolved alerts sent.
func (p *StatusPublisher) Resolved() int64 { return p.resolved.Load() }

// Published counts the status messages sent.
func (p *StatusPublisher) Published() int64 { return p.published.Load() }

// Skipped counts the task events no status was sent for because they, or
// an event before them, could not be folded.
func (p *StatusPublisher) Skipped() int64 { return p.skipped.Load() }

// errFlush ends one subscription round so that it restarts from the
// checkpoint.
var errFlush = errors.New("status delivery failed")

// Run publishes until ctx ends, restarting from the checkpoint after a
// failed delivery. It refuses to start with an invalid configuration
// (Validate).
func (p *StatusPublisher) Run(ctx context.Context) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.CheckpointEvery <= 0 {
		p.CheckpointEvery = DefaultStatusCheckpointEvery
	}
	for ctx.Err() == nil {
		err := p.round(ctx)
		if ctx.Err() != nil {
			return nil
		}
		p.Logger.Warn("status publisher restarts from its checkpoint", "err", err.Error())
		select {
		case <-time.After(DefaultStatusRestartAfter):
		case <-ctx.Done():
		}
	}
	return nil
}

func (p *StatusPublisher) round(ctx context.Context) error {
	p.tasks = map[string]*domain.Task{}
	if p.Retention != nil {
		// Limits a failed round started are set again from the
		// checkpoint.
		_ = p.Retention.Wait()
	}
	from := domain.FromStart()
	position, ok, err := p.Checkpoints.LoadCheckpoint(ctx, p.Name)
	if err != nil {
		return err
	}
	if ok {
		from = domain.AfterPosition(position)
	} else {
		// Never skipping is what at-least-once promises; on a store with a
		// long history (a status role added late, a deleted checkpoint
		// stream) it is a burst of old statuses, so say so.
		p.Logger.Info("no status checkpoint: publishing the status of every task event from the start of the store", "checkpoint", p.Name)
	}
	var pending uint64
	var hasPending bool
	lastSave := time.Now()
	checkpoint := func() error {
		if !hasPending {
			return nil
		}
		if err := p.Sink.Flush(ctx); err != nil {
			return errors.Mark(errors.Wrap(err, "flush statuses"), errFlush)
		}
		if p.Retention != nil {
			if err := p.Retention.Wait(); err != nil {
				return errors.Wrap(err, "limit the streams of finished tasks")
			}
		}
		p.forgetFinishedReplyTopics()
		if err := p.Checkpoints.SaveCheckpoint(ctx, p.Name, pending); err != nil {
			return err
		}
		hasPending, lastSave = false, time.Now()
		return nil
	}
	return p.Store.SubscribeAll(ctx, from, domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
		if it.CaughtUp {
			return checkpoint()
		}
		err := p.publish(ctx, *it.Event)
		p.heldTasks.Store(int64(len(p.tasks)))
		if err != nil {
			return err
		}
		pending, hasPending = it.Event.Position, true
		if time.Since(lastSave) >= p.CheckpointEvery {
			return checkpoint()
		}
		return nil
	})
}

// publish folds e and sends its status. An event that cannot be folded
// (domain.ErrUnreadableEvent, in it or before it in its stream) gets no
// status: the publisher logs and counts it and forgets the task, so the
// task's later events read its stream again (and fail the same way until a
// version that reads the event runs).
func (p *StatusPublisher) publish(ctx context.Context, e domain.RecordedEvent) error {
	id, _ := domain.TaskIDFromStream(e.Stream)
	t := p.tasks[id]
	if t == nil && e.Revision > 0 {
		// A task that started before the checkpoint: fold its history.
		var err error
		if t, err = p.load(ctx, id, e.Revision); errors.Is(err, domain.ErrUnreadableEvent) {
			p.unreadable(id, err)
			return nil
		} else if errors.Is(err, domain.ErrTaskExpired) {
			// A finished task whose history the retention dropped while
			// the publisher was behind: its statuses went out before.
			p.skipped.Add(1)
			return nil
		} else if err != nil {
			return err
		}
	}
	if t == nil {
		t = domain.NewTask(id)
	}
	wasError, failedStep := t.State == domain.StateError, t.FailedStep
	wasFinished := finished(t)
	ev, err := t.ApplyRecorded(&e)
	switch {
	case err != nil:
		p.unreadable(id, err)
		return nil
	case ev == nil:
		return nil // published already
	}
	if wasError && t.State != domain.StateError && p.Alerts != nil {
		if err := p.Alerts.RaiseAlert(ctx, protocol.ResolvedAlert(t, failedStep, ev, e.Revision)); err != nil {
			// The round restarts from the checkpoint, before this event.
			return errors.Wrapf(err, "resolve the alert of task %s", id)
		}
		p.resolved.Add(1)
	}
	// An event declared as having no status (protocol's status test) sends
	// none.
	if st := protocol.StatusOf(t, ev, e.Revision, e.Recorded); st.Status != "" {
		// A status is a message of its own in the task's trace.
		st.TraceParent = ChildTraceParent(st.TraceParent)
		if domain.ReservedTopic(st.ReplyTo) {
			// Accepted before reply topics were checked: a status there
			// would read as a forged order, command or reply.
			st.ReplyTo = ""
		}
		p.Sink.PublishStatus(ctx, st)
		p.published.Add(1)
	}
	if finished(t) && !wasFinished && p.Retention != nil {
		if err := p.Retention.Finished(ctx, t, e.Recorded); err != nil {
			// The round restarts from the checkpoint, before this event.
			return err
		}
	}
	if finished(t) {
		delete(p.tasks, id)
		if t.ReplyTo != "" {
			if p.finished == nil {
				p.finished = map[string]struct{}{}
			}
			p.finished[t.ReplyTo] = struct{}{}
		}
	} else {
		p.tasks[id] = t
	}
	return nil
}

// finished reports whether a task reached a final state: Processed or
// Compensated, not Error, which waits for an operator.
func finished(t *domain.Task) bool {
	return t.State == domain.StateProcessed || t.State == domain.StateCompensated
}

// forgetFinishedReplyTopics tells a ReplyTopicForgetter sink, once every
// status is flushed, the reply topics of the finished tasks that no task
// still followed names, so that the sink's client stops refreshing them and
// the broker can delete them once idle (a topic costs it file descriptors).
func (p *StatusPublisher) forgetFinishedReplyTopics() {
	forgetter, ok := p.Sink.(ReplyTopicForgetter)
	if !ok || len(p.finished) == 0 {
		p.finished = nil
		return
	}
	for _, t := range p.tasks {
		delete(p.finished, t.ReplyTo)
	}
	topics := make([]string, 0, len(p.finished))
	for topic := range p.finished {
		topics = append(topics, topic)
	}
	p.finished = nil
	if len(topics) > 0 {
		forgetter.ForgetReplyTopics(topics)
	}
}

// unreadable forgets a task whose events cannot be folded.
func (p *StatusPublisher) unreadable(id string, err error) {
	p.skipped.Add(1)
	p.Logger.Error("no status for a task event that cannot be folded", "task_id", id, "err", err.Error())
	delete(p.tasks, id)
}

// load folds a task's events before revision until.
func (p *StatusPublisher) load(ctx context.Context, id string, until uint64) (*domain.Task, error) {
	return NewTaskRepository(p.Store).LoadBefore(ctx, id, until)
}
