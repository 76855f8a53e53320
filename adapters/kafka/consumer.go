package kafka

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
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
	// OnRevoking, when set, is told as soon as partitions are being
	// revoked or are lost, before the records in flight on them finish
	// (which may take up to 15 s): an agent stops announcing them at once,
	// so that no command is routed to a partition it is giving up.
	OnRevoking func(map[string][]int32)
	// Opts are extra client options.
	Opts []kgo.Opt
	// MoreTopics, when set, is asked every TopicsInterval (default 2 s)
	// for topics to consume besides Topics; new ones are added while the
	// loop runs (workflows registered at run time bring their trigger
	// topics).
	MoreTopics     func(ctx context.Context) ([]string, error)
	TopicsInterval time.Duration
	// Band, when set, makes the loop prefer records of higher priority: it
	// names the priority of a topic's records (an agent's command topics,
	// protocol.CommandTopicPriority). Records polled are then held, at
	// most MaxInFlight per band, and each free place goes to the record
	// of the best aged rank (domain.AgedRank over its time in Kafka;
	// ties to the one waiting longest). A band whose held records reach
	// MaxInFlight is paused until they fall below, so that a burst of low
	// records never keeps high ones from being polled.
	Band func(topic string) domain.Priority
	// Aging is the aging interval of Band's rule; default
	// domain.DefaultPriorityAging.
	Aging time.Duration
	// Now tells the time for aging; default time.Now.
	Now func() time.Time
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
	// idle are the workers waiting for a key, the last to finish on top;
	// stopped ends them once the loop stops.
	idle    []*worker
	stopped chan struct{}
	// held are the records polled and not started yet, per band (by
	// domain.Priority.Rank), in the order polled; only with Band.
	held [3][]*kgo.Record
	// paused are the topics paused because their band is full.
	paused map[string]bool
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
	c := &consumer{ctx: ctx, cfg: cfg, handler: handler, tracks: map[partition]*tracker{}, queues: map[string][]*kgo.Record{},
		stopped: make(chan struct{})}
	c.changed = sync.NewCond(&c.mu)
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// The broker answers a fetch as soon as a record arrives; the wait
		// only bounds an idle poll, so it costs no latency.
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
		if cfg.Band != nil {
			if !c.pollBands(ctx, room) {
				break
			}
			continue
		}
		fetches := client.PollRecords(ctx, room)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			break
		}
		c.logErrors(fetches)
		fetches.EachRecord(c.start)
	}
	// Stopping: handlers see ctx end; what they finished is committed, what
	// they did not is redelivered.
	close(c.stopped)
	c.workers.Wait()
	<-committerDone
	commitCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	c.commit(commitCtx, nil)
	cancel()
	client.Close()
	return nil
}

func (c *consumer) logErrors(fetches kgo.Fetches) {
	fetches.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) {
			return // a poll that waited its time (pollBands)
		}
		c.cfg.Logger.Warn("kafka fetch", "group", c.cfg.Group, "topic", topic, "partition", p, "err", err.Error())
	})
}

// pollBands polls what is there (waiting for records only when none is
// held), holds it by band, and starts up to room held records, best aged
// rank first. It reports false once the loop must stop.
func (c *consumer) pollBands(ctx context.Context, room int) bool {
	c.mu.Lock()
	held := c.heldCount()
	c.mu.Unlock()
	// Waiting for records is bounded, so that a band paused while it was
	// full is resumed within a second of a rebalance taking its held
	// records away.
	pollCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if held > 0 {
		pollCtx = nil // only what is buffered: do not wait with records to start
	}
	// Everything buffered: the client holds it in memory already, and
	// a higher band's records must be seen to be preferred. Paused bands
	// bound what is buffered.
	fetches := c.client.PollRecords(pollCtx, 0)
	if ctx.Err() != nil || fetches.IsClientClosed() {
		return false
	}
	c.logErrors(fetches)
	c.mu.Lock()
	fetches.EachRecord(func(r *kgo.Record) {
		c.track(r)
		rank := c.cfg.Band(r.Topic).Rank()
		c.held[rank] = append(c.held[rank], r)
	})
	var next []*kgo.Record
	for ; room > 0; room-- {
		r := c.nextHeld()
		if r == nil {
			break
		}
		next = append(next, r)
	}
	pause, resume := c.fullBands()
	c.mu.Unlock()
	if len(pause) > 0 {
		c.client.PauseFetchTopics(pause...)
	}
	if len(resume) > 0 {
		c.client.ResumeFetchTopics(resume...)
	}
	for _, r := range next {
		c.start(r)
	}
	return true
}

// heldCount counts the held records. The caller holds mu.
func (c *consumer) heldCount() int {
	return len(c.held[0]) + len(c.held[1]) + len(c.held[2])
}

// nextHeld takes the held record to start next: the head of the band
// whose head has the best aged rank, the one waiting longest on a tie
// (the higher band if they wait alike). The caller holds mu.
func (c *consumer) nextHeld() *kgo.Record {
	now := time.Now()
	if c.cfg.Now != nil {
		now = c.cfg.Now()
	}
	best, bestRank := -1, 0
	for band, rs := range c.held {
		if len(rs) == 0 {
			continue
		}
		rank := domain.AgedRank(c.cfg.Band(rs[0].Topic), now.Sub(rs[0].Timestamp), c.cfg.Aging)
		if best < 0 || rank < bestRank || (rank == bestRank && rs[0].Timestamp.Before(c.held[best][0].Timestamp)) {
			best, bestRank = band, rank
		}
	}
	if best < 0 {
		return nil
	}
	r := c.held[best][0]
	c.held[best][0] = nil
	c.held[best] = c.held[best][1:]
	return r
}

// fullBands returns the topics to pause, of bands holding MaxInFlight
// records or more, and those to resume, of bands holding fewer. The
// caller holds mu.
func (c *consumer) fullBands() (pause, resume []string) {
	if c.paused == nil {
		c.paused = map[string]bool{}
	}
	for _, topic := range c.cfg.Topics {
		full := len(c.held[c.cfg.Band(topic).Rank()]) >= c.cfg.MaxInFlight
		switch {
		case full && !c.paused[topic]:
			c.paused[topic] = true
			pause = append(pause, topic)
		case !full && c.paused[topic]:
			delete(c.paused, topic)
			resume = append(resume, topic)
		}
	}
	return pause, resume
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

// track notes a polled record in its partition's tracker, so that the
// committed offset stays below it until it is handled. The caller holds
// mu.
func (c *consumer) track(r *kgo.Record) *tracker {
	p := partition{r.Topic, r.Partition}
	t := c.tracks[p]
	if t == nil {
		t = &tracker{inflight: map[int64]int32{}, committed: -1}
		c.tracks[p] = t
	}
	t.inflight[r.Offset] = r.LeaderEpoch
	if r.Offset+1 > t.next.Offset {
		t.next = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
	}
	return t
}

func (c *consumer) start(r *kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.track(r)
	t.working++
	c.inflight++
	key := r.Topic + "\x00" + string(r.Key)
	if q, busy := c.queues[key]; busy {
		c.queues[key] = append(q, r)
		return
	}
	c.queues[key] = nil
	if n := len(c.idle); n > 0 {
		w := c.idle[n-1]
		c.idle[n-1], c.idle = nil, c.idle[:n-1]
		w.jobs <- job{key, r}
		return
	}
	c.workers.Add(1)
	go c.run(&worker{jobs: make(chan job, 1)}, key, r)
}

// worker handles keys' records, one key at a time, and then waits for the
// next key. Workers are kept rather than started per key: a new goroutine
// starts on a small stack, and a handler's depth made every one grow its
// stack several times, copying it each time (in the agents, 37 µs of CPU
// per order). The worker that finished last is the next to start (its
// stack is the least likely to have been shrunk by the collector since),
// so the others idle out after idleWorkerLife: as many are kept as keys
// were handled at once in that time.
type worker struct {
	// jobs holds the key the worker is given, once it is off the idle list.
	jobs chan job
}

// job is a key's first record, for a worker to handle with the key's
// records after it.
type job struct {
	key string
	r   *kgo.Record
}

// idleWorkerLife is how long a worker with nothing to do waits for a key
// before it ends (a variable for tests).
var idleWorkerLife = 10 * time.Second

// run is worker w's life: key's records, then the keys it is given.
func (c *consumer) run(w *worker, key string, r *kgo.Record) {
	defer c.workers.Done()
	idle := time.NewTimer(idleWorkerLife)
	defer idle.Stop()
	for {
		c.work(w, key, r)
		idle.Reset(idleWorkerLife)
		select {
		case j := <-w.jobs:
			key, r = j.key, j.r
			continue
		case <-idle.C:
		case <-c.stopped:
		}
		c.mu.Lock()
		if i := slices.Index(c.idle, w); i >= 0 {
			c.idle = slices.Delete(c.idle, i, i+1)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		// Given a key as it stopped waiting: the job is in w.jobs (start
		// sends it while it holds mu).
		j := <-w.jobs
		key, r = j.key, j.r
	}
}

// work handles the records of one key in order, then puts w on the idle
// list.
func (c *consumer) work(w *worker, key string, r *kgo.Record) {
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
			c.idle = append(c.idle, w)
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
	if c.cfg.OnRevoking != nil {
		c.cfg.OnRevoking(m)
	}
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
	// Held records of those partitions are the next owner's now.
	for band, rs := range c.held {
		kept := rs[:0]
		for _, r := range rs {
			if !gone[partition{r.Topic, r.Partition}] {
				kept = append(kept, r)
			}
		}
		clear(rs[len(kept):])
		c.held[band] = kept
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

// inbound is r as the processes see it. Its key and header values are
// copied into one string, one allocation rather than one each.
func inbound(r *kgo.Record) processes.Inbound {
	n := len(r.Key)
	for _, h := range r.Headers {
		n += len(h.Value)
	}
	var b strings.Builder
	b.Grow(n)
	b.Write(r.Key)
	for _, h := range r.Headers {
		b.Write(h.Value)
	}
	all := b.String()
	key, rest := all[:len(r.Key)], all[len(r.Key):]
	headers := make(processes.Headers, len(r.Headers))
	for i, h := range r.Headers {
		headers[i] = protocol.Header{Key: h.Key, Value: rest[:len(h.Value)]}
		rest = rest[len(h.Value):]
	}
	return processes.Inbound{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: key, Value: r.Value, Headers: headers}
}
