package processes

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes/port"
)

// Checkpoint defaults of the scheduler and the supervisor.
const (
	// DefaultTaskCheckpointEvery bounds the time between two task
	// checkpoints while events arrive. A checkpoint is one event in a
	// stream that keeps only its newest few, so this also bounds how many
	// events a restart replays (those of the last few seconds).
	DefaultTaskCheckpointEvery = 5 * time.Second
	// loadWorkers bounds how many task streams a follower reads at once
	// when it resumes from a checkpoint.
	loadWorkers = 16
	// loadAttempts bounds how often one task stream is read at start
	// before the follower goes on without it (and keeps it in its
	// checkpoints, so a later start reads it again).
	loadAttempts = 5
)

// loadTasks reads and folds the streams of the tasks a checkpoint names,
// loadWorkers at a time. It returns the folded tasks (those never
// submitted left out) and the ids whose stream could not be read.
func loadTasks(ctx context.Context, repo *TaskRepository, ids []string, logger *slog.Logger) (tasks []*domain.Task, unread []string) {
	var mu sync.Mutex
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(loadWorkers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				t, err := readTask(ctx, repo, id, logger)
				mu.Lock()
				if err != nil {
					unread = append(unread, id)
				} else if t.Exists() {
					tasks = append(tasks, t)
				}
				mu.Unlock()
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	return tasks, unread
}

// readTask reads and folds one task stream, trying again a few times. A
// stream with an event that cannot be read is not read again: it would
// not fold the next time either.
func readTask(ctx context.Context, repo *TaskRepository, id string, logger *slog.Logger) (*domain.Task, error) {
	for attempt := 1; ; attempt++ {
		t, err := repo.Load(ctx, id)
		switch {
		case err == nil:
			return t, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case attempt == loadAttempts || errors.Is(err, domain.ErrUnreadableEvent):
			logger.Error("task of the checkpoint cannot be read; it is kept for the next checkpoint", "task_id", id, "err", err.Error())
			return nil, err
		}
		select {
		case <-time.After(port.Wait(DefaultBackoff, attempt)):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// resumePoint loads the newest checkpoint under name. Without one, or when
// it cannot be read, the follower starts from the start: always correct,
// only slower.
func resumePoint(ctx context.Context, cps TaskCheckpoints, name string, logger *slog.Logger) (domain.TaskCheckpoint, bool) {
	cp, ok, err := cps.LoadTaskCheckpoint(ctx, name)
	if err != nil {
		logger.Warn("task checkpoint cannot be read; following the store from the start", "checkpoint", name, "err", err.Error())
		return domain.TaskCheckpoint{}, false
	}
	if !ok {
		logger.Info("no task checkpoint; following the store from the start", "checkpoint", name)
	}
	return cp, ok
}

// saveTaskCheckpoint saves cp, sorted so that equal sets save equal bytes.
func saveTaskCheckpoint(ctx context.Context, cps TaskCheckpoints, name string, cp domain.TaskCheckpoint, logger *slog.Logger) bool {
	slices.Sort(cp.Tasks)
	if err := cps.SaveTaskCheckpoint(ctx, name, cp); err != nil {
		if ctx.Err() == nil {
			// The previous checkpoint stays valid: a restart replays more.
			logger.Warn("task checkpoint not saved", "checkpoint", name, "tasks", len(cp.Tasks), "err", err.Error())
		}
		return false
	}
	return true
}

// checkpointer decides when a follower saves a task checkpoint: once
// every has passed since the last one while events arrive, when the
// follower catches up, and on a tick after the events stopped. Saves run
// one at a time, in the background, so the follower does not wait for the
// store. It is safe for concurrent use: the subscription goroutine calls
// handled and caughtUp, another goroutine ticks.
type checkpointer struct {
	every    time.Duration
	mu       sync.Mutex
	lastSave time.Time
	// position is that of the last event handled; pending says it is not
	// in a checkpoint yet.
	position uint64
	pending  bool
	saving   atomic.Bool
	// snapshot captures the follower's unfinished tasks as of position and
	// returns the save to run; nil means no checkpoints. It is called
	// after the event at position was handled (or queued in order), and
	// may see state past it, never before it.
	snapshot func(ctx context.Context, position uint64) (func(), error)
}

// handled notes that the event at position was handled (or queued in
// order for handling).
func (c *checkpointer) handled(ctx context.Context, position uint64) error {
	if c.snapshot == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.position, c.pending = position, true
	if time.Since(c.lastSave) < c.every {
		return nil
	}
	return c.take(ctx)
}

// caughtUp saves a checkpoint soon after a catch-up, so that a follower
// that had to read the whole history does not have to again.
func (c *checkpointer) caughtUp(ctx context.Context) error {
	if c.snapshot == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pending {
		return nil
	}
	return c.take(ctx)
}

// tick saves the events handled since the last checkpoint once every has
// passed, so that the last events before a quiet time are covered too.
func (c *checkpointer) tick(ctx context.Context) error {
	if c.snapshot == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pending || time.Since(c.lastSave) < c.every {
		return nil
	}
	return c.take(ctx)
}

// ticking calls tick every every until ctx ends.
func (c *checkpointer) ticking(ctx context.Context) {
	if c.snapshot == nil {
		return
	}
	ticker := time.NewTicker(c.every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			_ = c.tick(ctx)
		}
	}
}

// take starts a save; the caller holds mu.
func (c *checkpointer) take(ctx context.Context) error {
	if !c.saving.CompareAndSwap(false, true) {
		return nil // one save at a time; a later event or tick tries again
	}
	save, err := c.snapshot(ctx, c.position)
	if err != nil {
		c.saving.Store(false)
		return err
	}
	c.pending, c.lastSave = false, time.Now()
	go func() {
		defer c.saving.Store(false)
		save()
	}()
	return nil
}
