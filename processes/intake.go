package processes

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultMaxUnfinishedTasks is how many unfinished tasks an engine holds
// before its submitter stops taking new orders. An unfinished task costs
// about 16 KB of heap across the processes that follow it (scheduler,
// supervisor, status publisher, event store cache): 10,000 of them in a
// flood took the heap to 236 MB, near the 300 MiB soft memory limit, where
// garbage collection took a third of the CPU. 4,096 keep it near 150 MB
// and still give every agent more work than its room.
const DefaultMaxUnfinishedTasks = 4096

// intakePoll is how often a held-back order looks again for room.
const intakePoll = 10 * time.Millisecond

// IntakeGate holds new tasks back. AwaitRoom returns once a new task may
// start, or with ctx's error; release is called once the task is recorded
// (or could not be), when the count of unfinished tasks includes it.
type IntakeGate interface {
	AwaitRoom(ctx context.Context) (release func(), err error)
}

// UnfinishedLimit is an IntakeGate that keeps the tasks an engine holds in
// memory bounded: an order waits while Unfinished reports Max or more. The
// waiting order holds its consumer's place, so the consumer stops polling
// and the orders behind it wait in Kafka, acknowledged and durable, rather
// than as tasks in memory. Without it a burst of orders (a backlog, a
// flood) becomes as many tasks at once, and the memory and garbage
// collection they cost slow every task down.
type UnfinishedLimit struct {
	// Unfinished counts the unfinished tasks (Scheduler.Unfinished); it is
	// asked often, so it must be cheap.
	Unfinished func() int
	// Max is the most unfinished tasks; 0 means DefaultMaxUnfinishedTasks.
	Max    int
	Logger *slog.Logger

	once sync.Once
	// turn is held by the one waiting order that looks for room.
	turn chan struct{}
	mu   sync.Mutex
	// starting counts the tasks let through and not yet recorded.
	starting int
	noteMu   sync.Mutex
	lastNote time.Time
}

// AwaitRoom waits until fewer than Max tasks are unfinished or being
// started. Orders that find no room wait their turn, and only the first
// looks for room, so a thousand waiting orders cost one poll.
func (l *UnfinishedLimit) AwaitRoom(ctx context.Context) (func(), error) {
	limit := l.Max
	if limit <= 0 {
		limit = DefaultMaxUnfinishedTasks
	}
	if l.enter(limit) {
		return l.leave, nil
	}
	l.once.Do(func() { l.turn = make(chan struct{}, 1) })
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-l.turn }()
	if l.enter(limit) {
		return l.leave, nil
	}
	l.note(true, limit)
	tick := time.NewTicker(intakePoll)
	defer tick.Stop()
	for !l.enter(limit) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	l.note(false, limit)
	return l.leave, nil
}

// enter counts a task as being started if there is room for it: the tasks
// being started are not yet among the unfinished ones, and without them
// every order that looked in the meantime would pass.
func (l *UnfinishedLimit) enter(limit int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Unfinished()+l.starting >= limit {
		return false
	}
	l.starting++
	return true
}

// leave stops counting a task as being started.
func (l *UnfinishedLimit) leave() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starting--
}

// note logs when intake stops, at most once a minute: at the bound it
// stops and starts again with every task that finishes.
func (l *UnfinishedLimit) note(held bool, limit int) {
	if l.Logger == nil || !held {
		return
	}
	l.noteMu.Lock()
	defer l.noteMu.Unlock()
	if now := time.Now(); now.Sub(l.lastNote) >= time.Minute {
		l.lastNote = now
		l.Logger.Info("new orders wait in Kafka while the engine holds as many unfinished tasks as it may (--max-unfinished-tasks)", "max", limit)
	}
}
