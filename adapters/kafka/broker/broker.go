package broker

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// DefaultListen is Kafka's default address, on loopback.
const DefaultListen = "127.0.0.1:9092"

// MaxRecordBytes is the largest record saga's clients produce and the
// embedded broker accepts: large enough to dead-letter an oversized order
// whole. A real cluster needs message.max.bytes at least this large for
// that, or oversized orders are refused by the broker before saga sees them.
const MaxRecordBytes = 16 << 20

// lockFileName is the file in the data directory a running broker holds an
// exclusive lock on.
const lockFileName = "saga-broker.lock"

// ErrDataDirLocked is returned by Start when another broker, in this
// process or another, is using the data directory: two brokers on one
// directory would overwrite each other's log.
var ErrDataDirLocked = errors.New("data directory is locked by another broker")

// DefaultSyncTopics are the topics whose produces the embedded broker
// acknowledges only once they are on stable storage when Config's
// SyncTopics is nil: every topic but those listed with "!". So the orders
// topic and every other topic a workflow is triggered by (the input whose
// loss the event store cannot make good), the dead-letter topic (the only
// record left of an invalid order once the submitter has committed past
// it), the alerts topic (the supervisor records in the event store that it
// raised an alert), the sync barrier topic (whose records are acknowledged
// only once every record acknowledged before them is on stable storage) and
// any topic an application keeps in the embedded broker are synced.
//
// Statuses (saga.status and the reply topics reply.* and saga.reply.*) are
// not synced one by one: the status publisher produces a barrier before it
// saves its checkpoint, so a power loss can take back only statuses after
// that checkpoint, which it publishes again (a reply topic of another name,
// which a reply topic pattern may allow, is synced per produce). Commands,
// replies and heartbeats are left unsynced: recovery re-sends lost
// commands, times out attempts whose replies were lost, and instances beat
// every second.
var DefaultSyncTopics = []string{"*", "!" + protocol.CommandTopicPrefix + "*", "!" + protocol.RepliesTopic, "!" + protocol.AgentsTopic,
	"!" + protocol.StatusTopic, "!" + domain.ReplyTopicPrefix + "*", "!reply.*"}

// SyncTopicMatch reports whether topic is one of patterns, names or
// prefix* patterns as Config.SyncTopics takes them.
func SyncTopicMatch(patterns []string, topic string) bool { return topicMatcher(patterns)(topic) }

// Config configures the embedded broker.
type Config struct {
	// Listen is host:port to serve the Kafka protocol on; port 0 picks one.
	Listen string
	// DataDir keeps topics, records and group offsets across restarts. One
	// broker at a time may use it: Start fails with ErrDataDirLocked
	// otherwise.
	DataDir string
	// Partitions of each topic created, including auto-created ones.
	Partitions int32
	// Topics are created at start if missing.
	Topics []string
	// SyncTopics are the topics whose produces are acknowledged only once
	// the records are fsynced (concurrent produces share fsyncs). An entry
	// ending in "*" is a prefix: "saga.cmd.*"; "*" alone syncs every topic,
	// still with shared fsyncs. Nil means
	// DefaultSyncTopics; an empty, non-nil list syncs no topic, which gives
	// up the durability contract (a warning is logged). Records of other
	// topics are written to the file (the OS page cache) before they are
	// acknowledged, as with Kafka's defaults: they survive the broker
	// process being killed, not the machine losing power. Needs DataDir.
	SyncTopics []string
	// Fsync makes the broker fsync every produced batch of every topic, and
	// every group commit, one after the other before it acknowledges
	// (kfake's SyncWrites); SyncTopics is then moot. A whole saga ran 2.5
	// times slower with it than without; see BenchmarkProduceSynced for
	// produces alone.
	Fsync bool
	// TLS, when set, makes the broker serve TLS only, with this server
	// configuration. The durable-acknowledgement layer reads the decrypted
	// stream.
	TLS *tls.Config
	// Users, when set, makes the broker require SASL authentication of
	// every client. They are superusers: saga's clients need every topic.
	Users []SASLUser
	// MaxTopics caps the topics clients may make the broker create by
	// naming them (auto-creation: an order's new reply topic): each costs
	// file descriptors for as long as it exists. Past it the broker answers
	// that the topic does not exist, counts and logs the refusal, and
	// TopicCapacity reports ErrTopicCap; saga's own topics are never
	// refused. 0 means DefaultMaxTopics for the process's fd limit, a
	// negative number no cap.
	MaxTopics int
	// ReplyTopicGrace is how long a reply topic the broker created for a
	// status (not one its caller created) is kept before it may be deleted
	// to make room at MaxTopics. 0 means DefaultReplyTopicGrace, a
	// negative duration none.
	ReplyTopicGrace time.Duration
	// Retention bounds what the broker keeps of each partition; nil means
	// DefaultRetention, a zero Retention keeps everything. See Retention
	// for why no unconsumed record of a consumer group is removed.
	Retention *Retention
	Logger    *slog.Logger
}

// The SASL mechanisms the embedded broker accepts, named as Kafka names
// them.
const (
	// SASLPlain takes the user and password as they are: only over TLS.
	SASLPlain = "PLAIN"
	// SASLScramSHA256 is SCRAM with SHA-256 (RFC 7677).
	SASLScramSHA256 = "SCRAM-SHA-256"
	// SASLScramSHA512 is SCRAM with SHA-512.
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// SASLUser is a user the embedded broker accepts.
type SASLUser struct {
	// Mechanism is SASLPlain, SASLScramSHA256 or SASLScramSHA512; a SCRAM
	// user logs in only with the mechanism it was registered with.
	Mechanism      string
	User, Password string
}

// String shows the user without the password.
func (u SASLUser) String() string { return u.Mechanism + " " + u.User }

// mechanism is the SASL mechanism a client logs in with as u; nil for a
// mechanism the broker does not accept.
func (u SASLUser) mechanism() sasl.Mechanism {
	switch strings.ToUpper(u.Mechanism) {
	case SASLPlain:
		return plain.Auth{User: u.User, Pass: u.Password}.AsMechanism()
	case SASLScramSHA256:
		return scram.Auth{User: u.User, Pass: u.Password}.AsSha256Mechanism()
	case SASLScramSHA512:
		return scram.Auth{User: u.User, Pass: u.Password}.AsSha512Mechanism()
	}
	return nil
}

// Broker is a running embedded Kafka-protocol broker.
//
// What it keeps durable, and why that is enough for saga's contract ("what
// saga acknowledges, it never loses"): a produce to a synced topic (by
// default the orders, dead-letter, status, reply and alert topics, see
// DefaultSyncTopics) is acknowledged only after its records, and the
// directory entries of new files, are fsynced, so an acknowledged order
// survives a power loss, and so do the dead letter of an invalid one and a
// status whose sending the status publisher has checkpointed. Everything
// else is written without fsync: commands, replies, committed group offsets
// and producer state. Commands and replies are internal records that
// recovery re-derives from the event store: the scheduler re-sends the
// commands of in-flight steps, and a lost reply is covered by the
// supervisor's deadline and retry.
//
// The one hazard in unsynced data is a committed offset that survives while
// the records it covers do not: new records would reuse the lost offsets
// and a group would skip them. Start therefore clamps every committed
// offset to its partition's log end before any client is served.
type Broker struct {
	cluster  *kfake.Cluster
	listener *brokerListener
	sync     *syncer
	lock     *os.File
	// internalAuth is the user of the broker's own in-process client.
	internalAuth SASLUser
	logger       *slog.Logger
	// stopRetention stops the retention loop and waits for it.
	stopRetention func()
	// topics caps auto-created topics; nil without a cap.
	topics *topicCap
	// idle is what retention passes know of reply topics' activity; only
	// the retention loop (or RetainOnce) uses it.
	idleMu sync.Mutex
	idle   idleTopics
}

// Start starts the embedded broker.
func Start(cfg Config) (*Broker, error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SyncTopics == nil {
		cfg.SyncTopics = DefaultSyncTopics
	}
	if cfg.Retention == nil {
		cfg.Retention = &DefaultRetention
	}
	if cfg.Retention.MaxAge < 0 || cfg.Retention.MaxRecords < 0 {
		return nil, errors.Newf("kafka retention: age %s and records %d must not be negative", cfg.Retention.MaxAge, cfg.Retention.MaxRecords)
	}
	host, portText, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, errors.Wrapf(err, "kafka listen address %q", cfg.Listen)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, errors.Wrapf(err, "kafka listen port %q", portText)
	}
	b := &Broker{logger: cfg.Logger, idle: idleTopics{ends: map[string]int64{}, since: map[string]time.Time{}}}
	if cfg.MaxTopics == 0 {
		_, limit := OpenFiles()
		cfg.MaxTopics = DefaultMaxTopics(limit, cfg.Partitions)
	}
	if cfg.MaxTopics > 0 {
		b.topics = newTopicCap(cfg.MaxTopics, cfg.ReplyTopicGrace, cfg.Logger)
	}
	ok := false
	defer func() {
		if !ok {
			b.Close()
		}
	}()
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, errors.Wrapf(err, "create kafka data directory %s", cfg.DataDir)
		}
		if b.lock, err = lockDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
		if err := trimTornLogs(cfg.DataDir, cfg.Logger); err != nil {
			return nil, err
		}
		if !cfg.Fsync && len(cfg.SyncTopics) > 0 {
			b.sync = newSyncer(cfg.DataDir, topicMatcher(cfg.SyncTopics), cfg.Logger)
		}
	}
	opts := []kfake.Opt{
		kfake.Ports(port),
		// kfake binds 127.0.0.1; bind the configured host instead, and
		// serve through the listener that adds durable acknowledgements
		// and stays closed to clients until the broker is ready.
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			_, p, _ := net.SplitHostPort(address)
			ln, err := net.Listen(network, net.JoinHostPort(host, p))
			if err != nil {
				return nil, err
			}
			b.listener = newBrokerListener(ln, b.sync)
			b.listener.tls = cfg.TLS
			return b.listener, nil
		}),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(int(cfg.Partitions)),
		kfake.WithLogger(slogLogger{cfg.Logger}),
		kfake.BrokerConfigs(kfakeBrokerConfigs()),
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
		if cfg.Fsync {
			opts = append(opts, kfake.SyncWrites())
		}
	}
	if len(cfg.Users) > 0 {
		opts = append(opts, kfake.EnableSASL())
		for _, u := range cfg.Users {
			opts = append(opts, kfake.Superuser(u.Mechanism, u.User, u.Password))
		}
		b.internalAuth = cfg.Users[0]
	}
	if len(cfg.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(cfg.Partitions, cfg.Topics...))
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, errors.Wrapf(err, "start embedded kafka on %s", cfg.Listen)
	}
	b.cluster = cluster
	if len(cfg.Users) > 0 {
		if err := b.advertiseSASLHandshakeV0(cluster); err != nil {
			return nil, err
		}
	}
	if b.sync != nil {
		lookup := func(id [16]byte) (string, bool) {
			if info := cluster.TopicIDInfo(id); info != nil {
				return info.Topic, true
			}
			return "", false
		}
		b.sync.topicOf.Store(&lookup)
		// meta.json, topics.json and partitions/ as kfake just wrote them.
		for _, dir := range []string{filepath.Dir(cfg.DataDir), cfg.DataDir, filepath.Join(cfg.DataDir, "partitions")} {
			if err := fsyncPath(dir); err != nil {
				return nil, errors.Wrap(err, "sync kafka data directory")
			}
		}
	}
	if cfg.DataDir != "" {
		if err := b.clampOffsets(cfg.Logger); err != nil {
			return nil, err
		}
	}
	if b.topics != nil {
		if err := b.countTopics(); err != nil {
			return nil, err
		}
		b.topics.install(cluster)
	}
	if err := b.guardConfigs(*cfg.Retention, cfg.Partitions); err != nil {
		return nil, err
	}
	if cfg.Retention.IdleReplyTopicAfter > 0 {
		nameProducedTopicIDs(cluster)
	}
	b.listener.logger = cfg.Logger
	b.listener.openToClients()
	// Passes run even with no broker-wide cap: a topic's own retention.ms
	// and retention.bytes apply.
	b.startRetention(*cfg.Retention, cfg.Logger)
	ok = true
	switch {
	case cfg.DataDir == "":
		cfg.Logger.Warn("kafka listening without a data directory: nothing survives a restart", "addr", b.Addrs()[0])
	case cfg.Fsync:
		cfg.Logger.Info("kafka listening", "addr", b.Addrs()[0], "data", cfg.DataDir, "fsync", "every topic")
	case len(cfg.SyncTopics) == 0:
		cfg.Logger.Warn("kafka listening with no synced topic: acknowledged orders can be lost in a power loss", "addr", b.Addrs()[0], "data", cfg.DataDir)
	default:
		cfg.Logger.Info("kafka listening", "addr", b.Addrs()[0], "data", cfg.DataDir, "fsync", cfg.SyncTopics)
	}
	if cfg.TLS != nil || len(cfg.Users) > 0 {
		cfg.Logger.Info("kafka requires", "tls", cfg.TLS != nil, "sasl", len(cfg.Users) > 0)
	}
	return b, nil
}

// clampOffsets runs clampOffsets over an in-process connection while the
// broker serves no client yet.
func (b *Broker) clampOffsets(logger *slog.Logger) error {
	client, err := b.internalClient()
	if err != nil {
		return errors.Wrap(err, "kafka client to check committed offsets")
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return clampOffsets(ctx, client, logger)
}

// internalClient is a client of the broker over in-process connections.
func (b *Broker) internalClient() (*kgo.Client, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(b.listener.Addr().String()), kgo.Dialer(b.listener.dialInternal)}
	if u := b.internalAuth; u.User != "" {
		// In-process connections skip TLS, not SASL.
		opts = append(opts, kgo.SASL(u.mechanism()))
	}
	return kgo.NewClient(opts...)
}

// startRetention runs a retention pass at start and then every interval,
// until Close.
func (b *Broker) startRetention(r Retention, logger *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.stopRetention = func() { cancel(); <-done }
	go func() {
		defer close(done)
		ticker := time.NewTicker(r.interval())
		defer ticker.Stop()
		for {
			if _, err := b.RetainOnce(ctx, r); err != nil && ctx.Err() == nil {
				logger.Warn("kafka retention pass failed; records are kept until the next", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
}

// RetainOnce runs one retention pass with r now and reports the number of
// records removed; with r.IdleReplyTopicAfter it also deletes the reply
// topics idle that long (as seen by the passes so far). The broker runs
// passes by itself; this is for tests and tools.
func (b *Broker) RetainOnce(ctx context.Context, r Retention) (int64, error) {
	return b.RetainOnceAt(ctx, r, time.Now())
}

// RetainOnceAt runs RetainOnce as if it were now: records' ages and reply
// topics' idleness go by now, so that a test can let hours pass.
func (b *Broker) RetainOnceAt(ctx context.Context, r Retention, now time.Time) (int64, error) {
	client, err := b.internalClient()
	if err != nil {
		return 0, errors.Wrap(err, "kafka client for retention")
	}
	defer client.Close()
	adm := kadm.NewClient(client)
	removed, err := applyRetention(ctx, adm, r, now, b.partitionBytes, b.logger)
	if err != nil || r.IdleReplyTopicAfter <= 0 {
		return removed, err
	}
	b.idleMu.Lock()
	defer b.idleMu.Unlock()
	_, err = b.deleteIdleReplyTopics(ctx, client, &b.idle, r.IdleReplyTopicAfter, now)
	return removed, errors.Wrap(err, "delete idle reply topics")
}

// partitionBytes reports the bytes each partition of topic holds.
func (b *Broker) partitionBytes(topic string) map[int32]int64 {
	sizes := map[int32]int64{}
	for _, p := range b.cluster.PartitionInfos(topic) {
		sizes[p.Partition] = p.NumBytes
	}
	return sizes
}

// guardConfigs installs the config guard (see configGuard), after moving
// retention settings stored by earlier versions.
func (b *Broker) guardConfigs(r Retention, partitions int32) error {
	g := &configGuard{cluster: b.cluster, retention: r, partitions: partitions, kfakeBroker: kfakeBrokerConfigs(), topics: b.topics}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.moveStoredRetention(ctx, b); err != nil {
		return errors.Wrap(err, "kafka topic configs")
	}
	if err := g.loadBrokerConfigs(ctx, b); err != nil {
		return errors.Wrap(err, "kafka broker configs")
	}
	g.install()
	return nil
}

// countTopics tells the cap the topics the broker holds at start.
func (b *Broker) countTopics() error {
	client, err := b.internalClient()
	if err != nil {
		return errors.Wrap(err, "kafka client to count topics")
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listedAt := time.Now()
	listed, err := kadm.NewClient(client).ListTopics(ctx)
	if err != nil {
		return errors.Wrap(err, "list the embedded kafka's topics")
	}
	b.topics.reset(listed.Names(), listedAt, true)
	return nil
}

// topicMatcher matches topics against names and "prefix*" patterns.
func topicMatcher(patterns []string) func(string) bool {
	var in, out []string
	for _, p := range patterns {
		if excluded, ok := strings.CutPrefix(p, "!"); ok {
			out = append(out, excluded)
		} else {
			in = append(in, p)
		}
	}
	matches := func(patterns []string, topic string) bool {
		for _, p := range patterns {
			if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(topic, prefix) || p == topic {
				return true
			}
		}
		return false
	}
	return func(topic string) bool { return matches(in, topic) && !matches(out, topic) }
}

// Addrs are the broker's addresses, to use as seed brokers.
func (b *Broker) Addrs() []string { return b.cluster.ListenAddrs() }

// ObserveSyncs makes the broker call f after each fsync of a partition's
// segment or index file, with the file's size that the fsync made durable:
// what a power loss cannot take back. It is for tests and diagnostics (a
// power-loss test keeps only what was synced); call it before producing.
// It does nothing on a broker that syncs no topic or every batch
// (Config.Fsync).
func (b *Broker) ObserveSyncs(f func(path string, size int64)) {
	if b.sync != nil {
		b.sync.hooks.synced = f
	}
}

// Close stops the broker, saves its state and releases the data directory.
func (b *Broker) Close() {
	if b.stopRetention != nil {
		b.stopRetention()
		b.stopRetention = nil
	}
	if b.sync != nil {
		b.sync.closed.Store(true)
	}
	if b.cluster != nil {
		b.cluster.Close()
	}
	if b.sync != nil {
		b.sync.shutdown()
	}
	if b.lock != nil {
		b.lock.Close() // releases the flock
		b.lock = nil
	}
}

type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	text := fmt.Sprintf(msg, args...)
	switch level {
	case kfake.LogLevelError:
		s.l.Error("kafka broker: " + text)
	case kfake.LogLevelWarn:
		s.l.Warn("kafka broker: " + text)
	default:
		s.l.Debug("kafka broker: " + text)
	}
}
