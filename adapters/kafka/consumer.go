package kafka

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sagaengine/saga/processes"
)

// Handler processes one record. An error means the record must be tried
// again; bad input is the handler's to dead-letter, not an error.
type Handler func(ctx context.Context, msg processes.Inbound) error

// ConsumerConfig configures a consume loop.
type ConsumerConfig struct {
	Brokers []string
	Group   string
	Topics  []string
	// MaxInFlight bounds how many records are being handled at once;
	// records with the same key are always handled one after another.
	// Default 1024.
	MaxInFlight int
	Logger      *slog.Logger
	// OnAssigned and OnRevoked, when set, are told about the group's
	// assignments, after the loop's own bookkeeping.
	OnAssigned, OnRevoked func(map[string][]int32)
	// Opts are extra client options.
	Opts []kgo.Opt
	// MoreTopics, when set, is asked every TopicsInterval (default 2 s)
	// for topics to consume besides Topics; new ones are added while the
	// loop runs (workflows registered at run time bring their trigger
	// topics).
	MoreTopics     func(ctx context.Context) ([]string, error)
	TopicsInterval time.Duration
}

// commitInterval is how often finished records' offsets are committed.
const commitInterval = 100 * time.Millisecond

// revokeWait bounds how long a rebalance waits for records in flight.
const revokeWait = 15 * time.Second

type partition struct {
	topic string
	id    int32
}

// tracker follows one partition's records in flight, so that the committed
// offset never passes a record that has not been handled.
type tracker struct {
	// inflight holds the records not handled yet (offset to leader
	// epoch), including those abandoned when the loop stopped, so the
	// watermark stays below them.
	inflight map[int64]int32
	// working counts the records a handler is still on.
	working   int
	next      kgo.EpochOffset // just after the highest record seen
	committed int64
}

// watermark is the offset to commit: the lowest record still in flight, or
// just after the highest record seen when none is.
func (t *tracker) watermark() kgo.EpochOffset {
	wm := t.next
	for off, epoch := range t.inflight {
		if off < wm.Offset {
			wm = kgo.EpochOffset{Epoch: epoch, Offset: off}
		}
	}
	return wm
}

type consumer struct {
	ctx     context.Context
	cfg     ConsumerConfig
	handler Handler
	client  *kgo.Client

	mu       sync.Mutex
	changed  *sync.Cond
	tracks   map[partition]*tracker
	queues   map[string][]*kgo.Record // per key; present while a worker runs
	inflight int
	workers  sync.WaitGroup
}

// Consume runs handler over the topics as a member of the consumer group
// until ctx ends. Records are handled concurrently as they arrive (same key
// in order, so one task's messages stay in order), without waiting for the
// rest of their poll, so one slow record does not hold up the others. A
// partition's offset is committed only up to its lowest record not yet
// handled, so a crash redelivers and never loses. A handler error is
// retried with backoff.
func Consume(ctx context.Context, cfg ConsumerConfig, handler Handler) error {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1024
	}
	c := &consumer{ctx: ctx, cfg: cfg, handler: handler, tracks: map[partition]*tracker{}, queues: map[string][]*kgo.Record{}}
	c.changed = sync.NewCond(&c.mu)
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.AllowAutoTopicCreation(),
		// A member that dies (kill -9) holds its partitions until its
		// session times out; 6 s is the broker's usual minimum.
		kgo.SessionTimeout(6 * time.Second),
		kgo.HeartbeatInterval(time.Second),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if cfg.OnAssigned != nil {
				cfg.OnAssigned(m)
			}
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { c.release(ctx, m, true) }),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { c.release(ctx, m, false) }),
	}, cfg.Opts...)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return errors.Wrapf(err, "kafka consumer %s", cfg.Group)
	}
	c.client = client
	committerDone := make(chan struct{})
	go func() { defer close(committerDone); c.commitLoop(ctx) }()
	if cfg.MoreTopics != nil {
		go c.followTopics(ctx)
	}

	for ctx.Err() == nil {
		room := c.awaitRoom(ctx)
		if room == 0 {
			break
		}
		fetches := client.PollRecords(ctx, room)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(topic string, p int32, err error) {
			cfg.Logger.Warn("kafka fetch", "group", cfg.Group, "topic", topic, "partition", p, "err", err.Error())
		})
		fetches.EachRecord(c.start)
	}
	// Stopping: handlers see ctx end; what they finished is committed, what
	// they did not is redelivered.
	c.workers.Wait()
	<-committerDone
	commitCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	c.commit(commitCtx, nil)
	cancel()
	client.Close()
	return nil
}

// followTopics adds the topics MoreTopics names to the consumer as they
// appear.
func (c *consumer) followTopics(ctx context.Context) {
	interval := c.cfg.TopicsInterval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	known := map[string]bool{}
	for _, t := range c.cfg.Topics {
		known[t] = true
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		topics, err := c.cfg.MoreTopics(ctx)
		if err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("list topics to consume", "group", c.cfg.Group, "err", err.Error())
		}
		var added []string
		for _, t := range topics {
			if !known[t] {
				known[t] = true
				added = append(added, t)
			}
		}
		if len(added) > 0 {
			c.cfg.Logger.Info("consuming more topics", "group", c.cfg.Group, "topics", added)
			c.client.AddConsumeTopics(added...)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// awaitRoom waits until fewer than MaxInFlight records are in flight and
// returns how many more may be polled, or 0 once ctx ends.
func (c *consumer) awaitRoom(ctx context.Context) int {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.changed.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.inflight >= c.cfg.MaxInFlight && ctx.Err() == nil {
		c.changed.Wait()
	}
	if ctx.Err() != nil {
		return 0
	}
	return c.cfg.MaxInFlight - c.inflight
}

func (c *consumer) start(r *kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := partition{r.Topic, r.Partition}
	t := c.tracks[p]
	if t == nil {
		t = &tracker{inflight: map[int64]int32{}, committed: -1}
		c.tracks[p] = t
	}
	t.inflight[r.Offset] = r.LeaderEpoch
	t.working++
	if r.Offset+1 > t.next.Offset {
		t.next = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
	}
	c.inflight++
	key := r.Topic + "\x00" + string(r.Key)
	if q, busy := c.queues[key]; busy {
		c.queues[key] = append(q, r)
		return
	}
	c.queues[key] = nil
	c.workers.Add(1)
	go c.work(key, r)
}

// work handles the records of one key in order.
func (c *consumer) work(key string, r *kgo.Record) {
	defer c.workers.Done()
	for r != nil {
		handled := c.handle(r)
		c.mu.Lock()
		if t := c.tracks[partition{r.Topic, r.Partition}]; t != nil {
			t.working--
			if handled {
				delete(t.inflight, r.Offset)
			}
		}
		c.inflight--
		c.changed.Broadcast()
		r = nil
		if q := c.queues[key]; len(q) > 0 {
			r, c.queues[key] = q[0], q[1:]
		} else {
			delete(c.queues, key)
		}
		c.mu.Unlock()
	}
}

// handle runs the handler until it succeeds, retrying errors with backoff;
// it reports false if the loop is stopping first.
func (c *consumer) handle(r *kgo.Record) bool {
	ctx := c.ctx
	msg := inbound(r)
	for try := 1; ; try++ {
		err := c.handler(ctx, msg)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		wait := processes.DefaultBackoff.Delay(try, rand.Float64())
		c.cfg.Logger.Warn("handler failed; retrying", "group", c.cfg.Group, "source", msg.Source(), "try", try, "in", wait, "err", err.Error())
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return false
		}
	}
}

func (c *consumer) commitLoop(ctx context.Context) {
	ticker := time.NewTicker(commitInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			c.commit(ctx, nil)
		}
	}
}

// commit commits the watermarks that moved, of only the given partitions
// when only is not nil.
func (c *consumer) commit(ctx context.Context, only map[partition]bool) {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	c.mu.Lock()
	for p, t := range c.tracks {
		if only != nil && !only[p] {
			continue
		}
		if wm := t.watermark(); wm.Offset > t.committed {
			if offsets[p.topic] == nil {
				offsets[p.topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[p.topic][p.id] = wm
		}
	}
	c.mu.Unlock()
	if len(offsets) == 0 {
		return
	}
	var failed error
	c.client.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		failed = err
		if err == nil {
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
						failed = perr
					}
				}
			}
		}
	})
	if failed != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("commit offsets", "group", c.cfg.Group, "err", failed.Error())
		}
		return
	}
	c.mu.Lock()
	for topic, parts := range offsets {
		for id, eo := range parts {
			if t := c.tracks[partition{topic, id}]; t != nil && eo.Offset > t.committed {
				t.committed = eo.Offset
			}
		}
	}
	c.mu.Unlock()
}

// release forgets revoked or lost partitions; for revoked ones it first
// waits (bounded) for their records in flight and commits them, so the next
// owner starts where this one finished.
func (c *consumer) release(ctx context.Context, m map[string][]int32, revoked bool) {
	gone := map[partition]bool{}
	for topic, ids := range m {
		for _, id := range ids {
			gone[partition{topic, id}] = true
		}
	}
	if revoked && len(gone) > 0 {
		deadline := time.Now().Add(revokeWait)
		stop := context.AfterFunc(ctx, func() { c.mu.Lock(); c.changed.Broadcast(); c.mu.Unlock() })
		stopOwn := context.AfterFunc(c.ctx, func() { c.mu.Lock(); c.changed.Broadcast(); c.mu.Unlock() })
		defer stopOwn()
		timer := time.AfterFunc(revokeWait, func() { c.mu.Lock(); c.changed.Broadcast(); c.mu.Unlock() })
		c.mu.Lock()
		for c.busy(gone) && time.Now().Before(deadline) && ctx.Err() == nil && c.ctx.Err() == nil {
			c.changed.Wait()
		}
		c.mu.Unlock()
		timer.Stop()
		stop()
		c.commit(ctx, gone)
	}
	c.mu.Lock()
	for p := range gone {
		delete(c.tracks, p)
	}
	c.mu.Unlock()
	if c.cfg.OnRevoked != nil {
		c.cfg.OnRevoked(m)
	}
}

// busy reports whether a handler is still on a record of the partitions.
// The caller holds mu.
func (c *consumer) busy(parts map[partition]bool) bool {
	for p := range parts {
		if t := c.tracks[p]; t != nil && t.working > 0 {
			return true
		}
	}
	return false
}

func inbound(r *kgo.Record) processes.Inbound {
	headers := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		headers[h.Key] = string(h.Value)
	}
	return processes.Inbound{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: r.Value, Headers: headers}
}
