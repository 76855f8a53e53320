package processes

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
)

// StatusPublisher turns every task event into a status message for the
// order's reply topic and for saga.status. It follows the store from a
// checkpoint: it publishes, waits until the broker has everything up to a
// position, then saves that position. Delivery is at least once; after a
// crash the messages since the last checkpoint are sent again, with the same
// revisions, so consumers can drop them.
type StatusPublisher struct {
	Store       EventStore
	Checkpoints Checkpoints
	Sink        StatusSink
	Logger      *slog.Logger
	// Name keys the checkpoint; publishers with one name share it.
	Name string
	// CheckpointEvery bounds the time between checkpoints. Default 200 ms.
	CheckpointEvery time.Duration

	tasks     map[string]*domain.Task
	published atomic.Int64
}

// Published counts the status messages sent.
func (p *StatusPublisher) Published() int64 { return p.published.Load() }

// errFlush ends one subscription round so that it restarts from the
// checkpoint.
var errFlush = errors.New("status delivery failed")

// Run publishes until ctx ends, restarting from the checkpoint after a
// failed delivery.
func (p *StatusPublisher) Run(ctx context.Context) error {
	if p.CheckpointEvery <= 0 {
		p.CheckpointEvery = 200 * time.Millisecond
	}
	for ctx.Err() == nil {
		err := p.round(ctx)
		if ctx.Err() != nil {
			return nil
		}
		p.Logger.Warn("status publisher restarts from its checkpoint", "err", err.Error())
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
	return nil
}

func (p *StatusPublisher) round(ctx context.Context) error {
	p.tasks = map[string]*domain.Task{}
	from := domain.FromStart()
	position, ok, err := p.Checkpoints.LoadCheckpoint(ctx, p.Name)
	if err != nil {
		return err
	}
	if ok {
		from = domain.AfterPosition(position)
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
		if err := p.publish(ctx, *it.Event); err != nil {
			return err
		}
		pending, hasPending = it.Event.Position, true
		if time.Since(lastSave) >= p.CheckpointEvery {
			return checkpoint()
		}
		return nil
	})
}

// publish folds e and sends its status.
func (p *StatusPublisher) publish(ctx context.Context, e domain.RecordedEvent) error {
	id, _ := domain.TaskIDFromStream(e.Stream)
	t := p.tasks[id]
	if t == nil && e.Revision > 0 {
		// A task that started before the checkpoint: fold its history.
		var err error
		if t, err = p.load(ctx, id, e.Revision); err != nil {
			return err
		}
	}
	if t == nil {
		t = domain.NewTask(id)
	}
	if int64(e.Revision) <= t.Revision {
		return nil
	}
	ev, err := e.Decode()
	if err != nil {
		p.Logger.Warn("no status for an event that cannot be read", "task", id, "revision", e.Revision, "err", err.Error())
		t.Revision = int64(e.Revision)
		return nil
	}
	t.Revision = int64(e.Revision) - 1
	t.Apply(ev)
	st := domain.StatusOf(t, ev, e.Revision, e.Recorded)
	if domain.ReservedTopic(st.ReplyTo) {
		// Accepted before reply topics were checked: a status there would
		// read as a forged order, command or reply.
		st.ReplyTo = ""
	}
	p.Sink.PublishStatus(ctx, st)
	p.published.Add(1)
	if t.State == domain.StateProcessed || t.State == domain.StateCompensated {
		delete(p.tasks, id)
	} else {
		p.tasks[id] = t
	}
	return nil
}

// load folds a task's events before revision until.
func (p *StatusPublisher) load(ctx context.Context, id string, until uint64) (*domain.Task, error) {
	recorded, err := p.Store.ReadStream(ctx, domain.TaskStream(id))
	if err != nil {
		return nil, err
	}
	t := domain.NewTask(id)
	for _, r := range recorded {
		if r.Revision >= until {
			break
		}
		if ev, err := domain.DecodeEvent(r.Type, r.Data); err == nil {
			t.Apply(ev)
		} else {
			t.Revision++
		}
	}
	return t, nil
}
