package eventstore

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sagaengine/saga/domain"
)

// Defaults of Fanout's limits.
const (
	// DefaultFollowerQueue bounds how far one follower may lag the shared
	// subscription before it is detached.
	DefaultFollowerQueue = 4096
	// DefaultDetachAfter is how long delivery waits for room in a full
	// follower queue before it detaches that follower.
	DefaultDetachAfter = 2 * time.Second
	// DefaultStallAfter is how long one handler call may run before Stalled
	// reports its follower.
	DefaultStallAfter = 30 * time.Second
	// DefaultAttachWait is how long Run waits for every registered
	// follower to say where it starts before it starts without the late
	// ones.
	DefaultAttachWait = 30 * time.Second
	// DefaultFarBehind is how far, in store positions (about bytes of log),
	// a follower may start before the latest starting point and still share
	// the subscription; one further behind follows the store on its own.
	DefaultFarBehind = 64 << 20
)

// Fanout shares one subscription to the store among the followers of one
// process (scheduler, supervisor, projection, status publisher): each event
// crosses the network and is decoded once, then handed to every follower.
//
// Wiring is explicit: each follower is registered by name with Register
// before Run starts, and uses the Feed it gets as its event store. A
// SubscribeAll on the Fanout itself, on a Feed after Run started, or a
// second one on the same Feed, gets a subscription of its own, so nobody
// misses events.
//
// Followers are isolated from each other. Each has a bounded queue and a
// goroutine of its own. A follower whose handler fails is forgotten at once
// (its SubscribeAll returns the error) and never waited for. A follower
// whose queue stays full for DetachAfter (a status publisher waiting on its
// broker, say) is detached: the shared subscription stops feeding it, and
// once it has handled what was queued it continues on a subscription of its
// own from the last event it handled. We chose detaching over dropping the
// slow follower: the follower loses nothing, sees no event twice, does not
// need to know, and catches up at its own pace, while the others never wait
// for it again. The price is one more subscription while it is behind.
type Fanout struct {
	*Store
	prefix string
	// QueueSize bounds each follower's queue. Default DefaultFollowerQueue.
	QueueSize int
	// DetachAfter is how long delivery waits for room in a full queue
	// before detaching the follower. Default DefaultDetachAfter.
	DetachAfter time.Duration
	// StallAfter is how long a handler call may run before Stalled reports
	// the follower. Default DefaultStallAfter.
	StallAfter time.Duration
	// AttachWait is how long Run waits for the registered followers to
	// subscribe before it starts without the late ones. Default
	// DefaultAttachWait.
	AttachWait time.Duration
	// FarBehind is how far before the latest starting point a follower
	// may start and still share the subscription; a follower further
	// behind (a task view rebuilt from the start of a long history) follows
	// the store on its own, so that the others, resuming from recent
	// checkpoints, do not wait for it to read the history. Default
	// DefaultFarBehind.
	FarBehind uint64

	mu        sync.Mutex
	followers []*follower
	feeds     []*Feed
	started   bool
	// decided is set once Run chose where the shared subscription starts,
	// start.
	decided bool
	start   domain.SubscribeFrom

	detached, failed, delivered atomic.Int64
}

// follower is a registered follower's place in the shared subscription.
// Only Run's goroutine sends to queue and closes detached; gone is closed
// once the follower stops reading.
type follower struct {
	// from is where the follower starts, once hasFrom (both under the
	// fan-out's mu); arrived is closed then.
	from     domain.SubscribeFrom
	hasFrom  bool
	arrived  chan struct{}
	queue    chan domain.SubscriptionItem
	detached chan struct{}
	cut      bool // detached; read and written by Run's goroutine only
	// name is the follower's; farBehind says it was detached at the start
	// for starting far behind the others (set before detached is closed).
	name      string
	farBehind bool
	gone      chan struct{}
	goneOnce  sync.Once
	attached  atomic.Bool
}

func (fl *follower) leave() { fl.goneOnce.Do(func() { close(fl.gone) }) }

// NewFanout shares store's subscriptions to streams starting with prefix.
func NewFanout(store *Store, prefix string) *Fanout {
	return &Fanout{Store: store, prefix: prefix}
}

// Feed is one registered follower's event store: Append and ReadStream go
// to the store, and its first SubscribeAll is fed by the shared
// subscription. It is safe for concurrent use.
type Feed struct {
	*Store
	fanout *Fanout
	name   string
	fl     *follower // nil when registered after Run started
	// busySince is when the handler call in progress started, in Unix
	// nanoseconds; zero while idle.
	busySince atomic.Int64
}

// Register adds a follower named name (for Stalled and logs). Call it before
// Run; a Feed registered later gets subscriptions of its own.
func (f *Fanout) Register(name string) *Feed {
	f.mu.Lock()
	defer f.mu.Unlock()
	feed := &Feed{Store: f.Store, fanout: f, name: name}
	if !f.started {
		feed.fl = &follower{name: name, queue: make(chan domain.SubscriptionItem, f.queueSize()),
			detached: make(chan struct{}), gone: make(chan struct{}), arrived: make(chan struct{})}
		f.followers = append(f.followers, feed.fl)
	}
	f.feeds = append(f.feeds, feed)
	return feed
}

func (f *Fanout) queueSize() int {
	if f.QueueSize > 0 {
		return f.QueueSize
	}
	return DefaultFollowerQueue
}

// FanoutStats counts the followers the fan-out let go.
type FanoutStats struct {
	// Detached counts followers moved to a subscription of their own
	// because their queue stayed full.
	Detached int64
	// Failed counts followers whose handler failed.
	Failed int64
}

// Stats returns the fan-out's counters.
func (f *Fanout) Stats() FanoutStats {
	return FanoutStats{Detached: f.detached.Load(), Failed: f.failed.Load()}
}

// Delivered counts the events the shared subscription received: with
// followers resuming from checkpoints, those after the earliest checkpoint.
func (f *Fanout) Delivered() int64 { return f.delivered.Load() }

// Stalled names the followers whose handler has been busy with one event
// for longer than StallAfter.
func (f *Fanout) Stalled() []string {
	limit := f.StallAfter
	if limit <= 0 {
		limit = DefaultStallAfter
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, feed := range f.feeds {
		if since := feed.busySince.Load(); since != 0 && time.Since(time.Unix(0, since)) > limit {
			out = append(out, feed.name)
		}
	}
	return out
}

// SubscribeAll follows the store as Store.SubscribeAll does. The Feed's
// first call is fed by the shared subscription while it keeps up; see
// Fanout. It blocks until ctx ends or handle fails.
func (feed *Feed) SubscribeAll(ctx context.Context, from domain.SubscribeFrom, streamPrefix string, handle func(domain.SubscriptionItem) error) error {
	handle = feed.timed(handle)
	fl := feed.fl
	if fl == nil || !strings.HasPrefix(streamPrefix, feed.fanout.prefix) || !fl.attached.CompareAndSwap(false, true) {
		return feed.Store.SubscribeAll(ctx, from, streamPrefix, handle)
	}
	defer fl.leave()
	f := feed.fanout
	f.mu.Lock()
	fl.from, fl.hasFrom = from, true
	early := f.decided && from.Before(f.start)
	f.mu.Unlock()
	close(fl.arrived)
	if early {
		fl.leave()
		feed.Store.logger.Info("event follower starts before the shared subscription; it follows the store on its own", "follower", feed.name)
		return feed.Store.SubscribeAll(ctx, from, streamPrefix, handle)
	}
	after, hasAfter := from.After()
	start, hasStart := after, hasAfter
	// take handles one shared item as this follower's own subscription
	// would: only its streams, only after its starting point. The shared
	// items come in order, once each, so past the starting point nothing
	// is compared: the events of a legacy transaction share their commit
	// position, and each is delivered.
	take := func(it domain.SubscriptionItem) error {
		if e := it.Event; e != nil {
			if !strings.HasPrefix(e.Stream, streamPrefix) || (hasStart && e.Position <= start) {
				return nil
			}
			hasStart = false
			if err := handle(it); err != nil {
				return err
			}
			after, hasAfter = e.Position, true
			return nil
		}
		return handle(it)
	}
	fail := func(err error) error {
		feed.fanout.failed.Add(1)
		feed.Store.logger.Warn("event follower failed; the others go on", "follower", feed.name, "err", err.Error())
		return err
	}
	for {
		select {
		case it := <-fl.queue:
			if err := take(it); err != nil {
				return fail(err)
			}
		case <-fl.detached:
			for drained := false; !drained; {
				select {
				case it := <-fl.queue:
					if err := take(it); err != nil {
						return fail(err)
					}
				default:
					drained = true
				}
			}
			if !fl.farBehind {
				feed.Store.logger.Warn("event follower fell behind; it follows the store on its own", "follower", feed.name, "after", after)
			}
			own := domain.FromStart()
			if hasAfter {
				own = domain.AfterPosition(after)
			}
			return feed.Store.SubscribeAll(ctx, own, streamPrefix, handle)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// timed records how long each handler call runs, for Stalled.
func (feed *Feed) timed(handle func(domain.SubscriptionItem) error) func(domain.SubscriptionItem) error {
	return func(it domain.SubscriptionItem) error {
		feed.busySince.Store(time.Now().UnixNano())
		defer feed.busySince.Store(0)
		return handle(it)
	}
}

// Run subscribes once, from where the earliest registered follower starts,
// and delivers to every registered follower until ctx ends. Followers
// registered after Run started get subscriptions of their own.
func (f *Fanout) Run(ctx context.Context) error {
	f.mu.Lock()
	f.started = true
	followers := f.followers
	f.mu.Unlock()
	if len(followers) == 0 {
		return nil
	}
	wait := f.DetachAfter
	if wait <= 0 {
		wait = DefaultDetachAfter
	}
	from, err := f.startingPoint(ctx, followers)
	if err != nil {
		return nil // ctx ended
	}
	err = f.Store.SubscribeAll(ctx, from, f.prefix, func(it domain.SubscriptionItem) error {
		if it.Event != nil {
			f.delivered.Add(1)
			if ev, err := domain.DecodeEvent(it.Event.Type, it.Event.Data); err == nil {
				it.Event.Decoded = ev
			}
		}
		for _, fl := range followers {
			f.deliver(ctx, fl, it, wait)
		}
		return nil
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// startingPoint waits until every follower has said where it starts (or
// left, or AttachWait passed) and returns the earliest of those places.
func (f *Fanout) startingPoint(ctx context.Context, followers []*follower) (domain.SubscribeFrom, error) {
	attachWait := f.AttachWait
	if attachWait <= 0 {
		attachWait = DefaultAttachWait
	}
	timer := time.NewTimer(attachWait)
	defer timer.Stop()
wait:
	for _, fl := range followers {
		select {
		case <-fl.arrived:
		case <-fl.gone:
		case <-timer.C:
			f.Store.logger.Warn("not every event follower subscribed in time; the shared subscription starts without them", "waited", attachWait)
			break wait
		case <-ctx.Done():
			return domain.FromStart(), ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	farBehind := f.FarBehind
	if farBehind == 0 {
		farBehind = DefaultFarBehind
	}
	var latest uint64
	for _, fl := range followers {
		if pos, ok := fl.from.After(); fl.hasFrom && ok {
			latest = max(latest, pos)
		}
	}
	var start domain.SubscribeFrom
	first := true
	for _, fl := range followers {
		if !fl.hasFrom {
			continue
		}
		if pos, _ := fl.from.After(); latest-pos > farBehind {
			// Detached before any delivery: it subscribes on its own from
			// its own start.
			fl.cut, fl.farBehind = true, true
			close(fl.detached)
			f.Store.logger.Info("event follower starts far behind the others; it follows the store on its own",
				"follower", fl.name, "from", pos, "others from", latest)
			continue
		}
		if first || fl.from.Before(start) {
			start, first = fl.from, false
		}
	}
	// With no follower heard from, the start is the safe choice.
	f.start, f.decided = start, true
	return start, nil
}

// deliver queues an item for a follower. It never blocks on a follower that
// is gone, and waits at most wait for room before detaching the follower.
func (f *Fanout) deliver(ctx context.Context, fl *follower, it domain.SubscriptionItem, wait time.Duration) {
	if fl.cut {
		return
	}
	select {
	case fl.queue <- it:
		return
	case <-fl.gone:
		fl.cut = true
		return
	default:
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case fl.queue <- it:
	case <-fl.gone:
		fl.cut = true
	case <-ctx.Done():
	case <-timer.C:
		fl.cut = true
		close(fl.detached)
		f.detached.Add(1)
	}
}
