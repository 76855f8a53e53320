package kafka

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// Defaults of AgentDirectoryConfig.
const (
	// DefaultMaxAgentInstances caps the instances a directory keeps.
	DefaultMaxAgentInstances = 10_000
	// DefaultKeepGone is how long an expired instance is still shown, as
	// gone.
	DefaultKeepGone = time.Minute
	// DefaultAgentSweepEvery is how often a directory looks for instances
	// that expired.
	DefaultAgentSweepEvery = time.Second
	// DefaultCatchUpIdle is how long a directory polls nothing after a
	// record before it counts as caught up although it has not seen the
	// records just before the end offsets listed at start (compaction
	// removed them); five times as long when it has read no record at all.
	DefaultCatchUpIdle = 2 * time.Second
)

// MaxHeartbeatBytes bounds a heartbeat record the directory keeps: one that
// lists three command topics of a thousand partitions each is about 15 KiB.
// A larger record is ignored as invalid, so that 10,000 instances cannot
// hold gigabytes.
const MaxHeartbeatBytes = 64 << 10

// invalidLogEvery bounds how often an invalid heartbeat of one key is
// logged; invalidLogKeys bounds how many keys are remembered for it.
const (
	invalidLogEvery = time.Minute
	invalidLogKeys  = 1024
)

// AgentDirectoryConfig configures an AgentDirectory.
type AgentDirectoryConfig struct {
	Brokers []string
	// Opts are extra client options: TLS and SASL (Security.Opts).
	Opts   []kgo.Opt
	Logger *slog.Logger
	// Topic is the heartbeats' topic; default protocol.AgentsTopic.
	Topic string
	// MaxInstances caps the instances kept, live and gone; past it the
	// instance that expires first is dropped (an expired one before any
	// live one). Default DefaultMaxAgentInstances.
	MaxInstances int
	// KeepGone is how long an instance stays in All once it has expired;
	// default DefaultKeepGone.
	KeepGone time.Duration
	// SweepEvery is how often the directory drops instances gone for
	// longer than KeepGone and tells of instances that expired (Changed);
	// default DefaultAgentSweepEvery.
	SweepEvery time.Duration
	// CatchUpIdle: see DefaultCatchUpIdle.
	CatchUpIdle time.Duration
	// Now tells the time for expiry; default time.Now.
	Now func() time.Time
	// OnChange, when set, is called (from the reading goroutine, without
	// the directory's lock) after every change Changed tells of.
	OnChange func()
}

// AgentInstance is an agent instance as the directory last heard of it.
type AgentInstance struct {
	Heartbeat protocol.AgentHeartbeat
	// Gone is set once the heartbeat has expired (AgentHeartbeat.Live is
	// false): the instance stopped without a tombstone, or stopped
	// announcing itself.
	Gone bool
}

// AgentDirectoryStats counts what a directory read.
type AgentDirectoryStats struct {
	// Heartbeats applied, tombstones applied, and records ignored because
	// they were not valid heartbeats.
	Heartbeats, Tombstones, Invalid int64
	// Evicted counts instances dropped to keep within MaxInstances.
	Evicted int64
	// Instances is how many instances it keeps now, live and gone.
	Instances int
}

// AgentDirectory follows the agent instances' heartbeats on
// protocol.AgentsTopic (a compacted topic keyed by instance) from its
// start, without a consumer group, and keeps the newest heartbeat of every
// instance: the scheduler routes by it (processes.AgentDirectory) and
// operators see it (All). It creates no topic. Its methods are safe for
// concurrent use; Run reads.
type AgentDirectory struct {
	cfg    AgentDirectoryConfig
	client *kgo.Client
	ready  chan struct{}
	once   sync.Once

	mu        sync.Mutex
	instances map[string]protocol.AgentHeartbeat // by record key (= instance)
	// byAgent indexes instances: the keys of each agent's instances.
	byAgent map[string]map[string]struct{}
	// fullWarned is when eviction of a live instance was last logged.
	fullWarned time.Time
	// expired are the instances known to have expired at the last sweep.
	expired map[string]bool
	changed chan struct{}
	// logged is when an invalid record of a key was last logged.
	logged map[string]time.Time

	heartbeats, tombstones, invalid, evicted atomic.Int64
}

var _ processes.AgentDirectory = (*AgentDirectory)(nil)

// NewAgentDirectory returns a directory; Run reads the topic.
func NewAgentDirectory(cfg AgentDirectoryConfig) (*AgentDirectory, error) {
	if cfg.Topic == "" {
		cfg.Topic = protocol.AgentsTopic
	}
	if cfg.MaxInstances <= 0 {
		cfg.MaxInstances = DefaultMaxAgentInstances
	}
	if cfg.KeepGone <= 0 {
		cfg.KeepGone = DefaultKeepGone
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = DefaultAgentSweepEvery
	}
	if cfg.CatchUpIdle <= 0 {
		cfg.CatchUpIdle = DefaultCatchUpIdle
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	// No AllowAutoTopicCreation: a reader must not create the topic
	// (uncompacted) before the engine does.
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(250 * time.Millisecond),
		kgo.MetadataMaxAge(10 * time.Second),
	}, cfg.Opts...)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, errors.Wrapf(err, "agent directory client for %v", cfg.Brokers)
	}
	return &AgentDirectory{cfg: cfg, client: client, ready: make(chan struct{}), instances: map[string]protocol.AgentHeartbeat{},
		byAgent: map[string]map[string]struct{}{},
		expired: map[string]bool{}, changed: make(chan struct{}), logged: map[string]time.Time{}}, nil
}

// Ready is closed once the directory has read the topic up to the end
// offsets it had when Run started (or found no topic to read).
func (d *AgentDirectory) Ready() <-chan struct{} { return d.ready }

// Changed returns a channel that is closed at the next change: heartbeats
// or tombstones applied (once for all those one poll brings), an instance
// expired (seen at a sweep, every SweepEvery) or forgotten. Every change
// closes the channel returned before it and puts a
// new one in its place, so a waiter takes Changed, checks what it waits
// for, then waits on the channel it took: no change between is missed.
func (d *AgentDirectory) Changed() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changed
}

// Stats counts what the directory read.
func (d *AgentDirectory) Stats() AgentDirectoryStats {
	d.mu.Lock()
	n := len(d.instances)
	d.mu.Unlock()
	return AgentDirectoryStats{Heartbeats: d.heartbeats.Load(), Tombstones: d.tombstones.Load(), Invalid: d.invalid.Load(),
		Evicted: d.evicted.Load(), Instances: n}
}

// Instances implements processes.AgentDirectory: the newest heartbeat of
// every instance of agent live at now, by instance.
func (d *AgentDirectory) Instances(agent string, now time.Time) []protocol.AgentHeartbeat {
	d.mu.Lock()
	out := make([]protocol.AgentHeartbeat, 0, len(d.byAgent[agent]))
	for key := range d.byAgent[agent] {
		if h := d.instances[key]; h.Live(now) {
			out = append(out, h)
		}
	}
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b protocol.AgentHeartbeat) int { return strings.Compare(a.Instance, b.Instance) })
	return out
}

// All returns every instance of every agent the directory keeps, by agent
// then instance: the live ones and those that expired less than KeepGone
// before now, marked Gone.
func (d *AgentDirectory) All(now time.Time) []AgentInstance {
	d.mu.Lock()
	out := make([]AgentInstance, 0, len(d.instances))
	for _, h := range d.instances {
		if !h.Live(now) && now.Sub(h.ExpiresAt) >= d.cfg.KeepGone {
			continue
		}
		out = append(out, AgentInstance{Heartbeat: h, Gone: !h.Live(now)})
	}
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b AgentInstance) int {
		return cmp.Or(strings.Compare(a.Heartbeat.Agent, b.Heartbeat.Agent), strings.Compare(a.Heartbeat.Instance, b.Heartbeat.Instance))
	})
	return out
}

// Run reads the topic until ctx ends, then closes the client. A broker that
// does not answer is retried; only ctx ends Run.
func (d *AgentDirectory) Run(ctx context.Context) error {
	defer d.client.Close()
	ends := d.endOffsets(ctx)
	if ctx.Err() != nil {
		return nil
	}
	if len(ends) == 0 {
		d.markReady()
	}
	sweep := time.NewTicker(d.cfg.SweepEvery)
	defer sweep.Stop()
	// lastRecord is when the last record arrived; zero before the first.
	var lastRecord time.Time
	began := time.Now()
	var warned time.Time // when a fetch error was last logged
	for ctx.Err() == nil {
		pollCtx, cancel := context.WithTimeout(ctx, d.cfg.SweepEvery)
		fetches := d.client.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil || fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && time.Since(warned) >= invalidLogEvery {
				warned = time.Now()
				d.cfg.Logger.Warn("agent directory fetch", "topic", topic, "partition", p, "err", err.Error())
			}
		})
		n, changed := 0, false
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			changed = d.apply(r) || changed
			if end, ok := ends[r.Partition]; ok && r.Offset+1 >= end {
				delete(ends, r.Partition)
			}
		})
		if n > 0 {
			lastRecord = time.Now()
		}
		if changed {
			d.notify() // once a poll, however many heartbeats it brought
		}
		switch {
		case len(ends) == 0:
			d.markReady()
		case !lastRecord.IsZero() && time.Since(lastRecord) >= d.cfg.CatchUpIdle,
			lastRecord.IsZero() && time.Since(began) >= 5*d.cfg.CatchUpIdle:
			d.markReady() // the records before the end were compacted away
		}
		select {
		case <-sweep.C:
			d.sweep()
		default:
		}
	}
	return nil
}

func (d *AgentDirectory) markReady() {
	d.once.Do(func() {
		close(d.ready)
		d.cfg.Logger.Info("agent directory caught up", "topic", d.cfg.Topic, "instances", d.Stats().Instances)
	})
}

// endOffsets lists the end of every non-empty partition, retrying until
// the broker answers; none when there is no topic yet.
func (d *AgentDirectory) endOffsets(ctx context.Context) map[int32]int64 {
	adm := kadm.NewClient(d.client)
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		reqCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		listed, err := adm.ListEndOffsets(reqCtx, d.cfg.Topic)
		if err == nil {
			err = listed.Error()
		}
		var starts kadm.ListedOffsets
		if err == nil {
			starts, err = adm.ListStartOffsets(reqCtx, d.cfg.Topic)
		}
		if err == nil {
			err = starts.Error()
		}
		cancel()
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil
		}
		if err == nil {
			ends := map[int32]int64{}
			listed.Each(func(o kadm.ListedOffset) {
				if start, ok := starts.Lookup(o.Topic, o.Partition); ok && start.Offset < o.Offset {
					ends[o.Partition] = o.Offset
				}
			})
			return ends
		}
		d.cfg.Logger.Warn("agent directory: list end offsets", "topic", d.cfg.Topic, "err", err.Error())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// apply applies one record: a heartbeat, a tombstone, or something to
// ignore and count. It reports whether the directory changed.
func (d *AgentDirectory) apply(r *kgo.Record) bool {
	key := string(r.Key)
	if r.Value == nil {
		if key == "" {
			d.reject(r, "a tombstone without a key")
			return false
		}
		d.tombstones.Add(1)
		d.mu.Lock()
		_, had := d.instances[key]
		d.removeLocked(key)
		d.mu.Unlock()
		return had
	}
	if len(r.Value) > MaxHeartbeatBytes {
		d.reject(r, fmt.Sprintf("a heartbeat of %d bytes, over the limit of %d", len(r.Value), MaxHeartbeatBytes))
		return false
	}
	h, err := protocol.ParseAgentHeartbeat(r.Value)
	if err == nil && key != h.Instance {
		err = errors.Newf("the record's key %q is not the instance %q", key, h.Instance)
	}
	if err != nil {
		d.reject(r, err.Error())
		return false
	}
	d.heartbeats.Add(1)
	now := d.cfg.Now()
	d.mu.Lock()
	if _, known := d.instances[key]; !known && len(d.instances) >= d.cfg.MaxInstances {
		d.evictLocked(now)
	}
	if old, known := d.instances[key]; known && old.Agent != h.Agent {
		d.removeLocked(key) // the instance now names another agent
	}
	d.instances[key] = h
	if d.byAgent[h.Agent] == nil {
		d.byAgent[h.Agent] = map[string]struct{}{}
	}
	d.byAgent[h.Agent][key] = struct{}{}
	if h.Live(now) {
		delete(d.expired, key)
	}
	d.mu.Unlock()
	return true
}

// removeLocked forgets an instance.
func (d *AgentDirectory) removeLocked(key string) {
	if h, ok := d.instances[key]; ok {
		delete(d.byAgent[h.Agent], key)
		if len(d.byAgent[h.Agent]) == 0 {
			delete(d.byAgent, h.Agent)
		}
	}
	delete(d.instances, key)
	delete(d.expired, key)
}

// evictLocked drops the instance that expires first: an expired one if
// any, else the live one closest to expiring.
func (d *AgentDirectory) evictLocked(now time.Time) {
	var victim string
	var first time.Time
	for key, h := range d.instances {
		if victim == "" || h.ExpiresAt.Before(first) {
			victim, first = key, h.ExpiresAt
		}
	}
	if victim == "" {
		return
	}
	d.removeLocked(victim)
	d.evicted.Add(1)
	if first.After(now) && now.Sub(d.fullWarned) >= invalidLogEvery {
		d.fullWarned = now
		d.cfg.Logger.Warn("agent directory full: a live instance dropped", "max", d.cfg.MaxInstances, "instance", victim)
	}
}

// reject counts a record that is not a valid heartbeat and logs it, at
// most once a minute per key.
func (d *AgentDirectory) reject(r *kgo.Record, why string) {
	d.invalid.Add(1)
	key := string(r.Key)
	now := time.Now()
	d.mu.Lock()
	last, seen := d.logged[key]
	log := !seen || now.Sub(last) >= invalidLogEvery
	if log {
		if len(d.logged) >= invalidLogKeys {
			clear(d.logged)
		}
		d.logged[key] = now
	}
	d.mu.Unlock()
	if log {
		d.cfg.Logger.Warn("agent directory: record ignored", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
			"key", truncate(key, 200), "reason", truncate(why, 500))
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return domain.CutUTF8(s, n) + "..."
}

// sweep forgets instances gone for longer than KeepGone and tells of those
// that expired since the last sweep.
func (d *AgentDirectory) sweep() {
	now := d.cfg.Now()
	changed := false
	d.mu.Lock()
	for key, h := range d.instances {
		switch {
		case h.Live(now):
			delete(d.expired, key)
		case now.Sub(h.ExpiresAt) >= d.cfg.KeepGone:
			d.removeLocked(key)
			changed = true
		case !d.expired[key]:
			d.expired[key] = true
			changed = true
		}
	}
	d.mu.Unlock()
	if changed {
		d.notify()
	}
}

// notify closes the current Changed channel and puts a new one in its
// place, then calls OnChange.
func (d *AgentDirectory) notify() {
	d.mu.Lock()
	close(d.changed)
	d.changed = make(chan struct{})
	d.mu.Unlock()
	if d.cfg.OnChange != nil {
		d.cfg.OnChange()
	}
}
