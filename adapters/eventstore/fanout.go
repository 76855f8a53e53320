package eventstore

import (
	"context"
	"strings"
	"sync"

	"github.com/sagaengine/saga/domain"
)

// Fanout shares one subscription to the store among the followers of one
// process (scheduler, supervisor, projection, status publisher): each event
// crosses the network and is decoded once, then handed to every follower in
// turn. It implements the same SubscribeAll as the Store, and passes
// Append and ReadStream through.
//
// Followers must all have called SubscribeAll before Run starts delivering;
// Run waits for the number it is told. Each follower has a bounded queue and
// goroutine of its own, so a follower that pauses (a status publisher waiting
// for its broker) holds up the others only once its queue is full. A
// follower whose handler fails is dropped (its SubscribeAll returns the
// error); the others go on.
type Fanout struct {
	*Store
	prefix string

	mu        sync.Mutex
	followers []*follower
	started   bool
	joined    chan struct{}
}

// followerQueue bounds how far one follower may lag the others.
const followerQueue = 4096

type follower struct {
	after    uint64
	hasAfter bool
	prefix   string
	handle   func(domain.SubscriptionItem) error
	queue    chan domain.SubscriptionItem
	ctx      context.Context
}

// NewFanout shares store's subscriptions to streams starting with prefix.
func NewFanout(store *Store, prefix string) *Fanout {
	return &Fanout{Store: store, prefix: prefix, joined: make(chan struct{}, 64)}
}

// SubscribeAll registers a follower and blocks until ctx ends or its handler
// fails. A follower that comes after delivery started (one that resubscribes
// from a checkpoint, say), or asks for another prefix, gets a subscription of
// its own, so it never misses events.
func (f *Fanout) SubscribeAll(ctx context.Context, from domain.SubscribeFrom, streamPrefix string, handle func(domain.SubscriptionItem) error) error {
	f.mu.Lock()
	if f.started || !strings.HasPrefix(streamPrefix, f.prefix) {
		f.mu.Unlock()
		return f.Store.SubscribeAll(ctx, from, streamPrefix, handle)
	}
	after, hasAfter := from.After()
	fl := &follower{after: after, hasAfter: hasAfter, prefix: streamPrefix, handle: handle,
		queue: make(chan domain.SubscriptionItem, followerQueue), ctx: ctx}
	f.followers = append(f.followers, fl)
	f.mu.Unlock()
	f.joined <- struct{}{}
	for {
		select {
		case it := <-fl.queue:
			if err := fl.handle(it); err != nil {
				f.drop(fl)
				return err
			}
		case <-ctx.Done():
			f.drop(fl)
			return ctx.Err()
		}
	}
}

// Run waits until want followers have joined, then subscribes once from the
// start and delivers to all of them until ctx ends.
func (f *Fanout) Run(ctx context.Context, want int) error {
	for i := 0; i < want; i++ {
		select {
		case <-f.joined:
		case <-ctx.Done():
			return nil
		}
	}
	f.mu.Lock()
	f.started = true
	f.mu.Unlock()
	err := f.Store.SubscribeAll(ctx, domain.FromStart(), f.prefix, func(it domain.SubscriptionItem) error {
		if it.Event != nil {
			if ev, err := domain.DecodeEvent(it.Event.Type, it.Event.Data); err == nil {
				it.Event.Decoded = ev
			}
		}
		f.mu.Lock()
		followers := f.followers
		f.mu.Unlock()
		for _, fl := range followers {
			f.deliver(fl, it)
		}
		return nil
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// deliver queues an item for a follower, waiting while its queue is full.
func (f *Fanout) deliver(fl *follower, it domain.SubscriptionItem) {
	if e := it.Event; e != nil {
		if !strings.HasPrefix(e.Stream, fl.prefix) || (fl.hasAfter && e.Position <= fl.after) {
			return
		}
	}
	select {
	case fl.queue <- it:
	case <-fl.ctx.Done():
	}
}

// drop stops delivering to a follower.
func (f *Fanout) drop(fl *follower) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, other := range f.followers {
		if other == fl {
			f.followers = append(f.followers[:i:i], f.followers[i+1:]...)
			return
		}
	}
}
