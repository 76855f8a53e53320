package kafka

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kfake"
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

// ErrDataDirLocked is returned by StartBroker when another broker, in this
// process or another, is using the data directory: two brokers on one
// directory would overwrite each other's log.
var ErrDataDirLocked = errors.New("data directory is locked by another broker")

// BrokerConfig configures the embedded broker.
type BrokerConfig struct {
	// Listen is host:port to serve the Kafka protocol on; port 0 picks one.
	Listen string
	// DataDir keeps topics, records and group offsets across restarts. One
	// broker at a time may use it: StartBroker fails with ErrDataDirLocked
	// otherwise.
	DataDir string
	// Partitions of each topic created, including auto-created ones.
	Partitions int32
	// Topics are created at start if missing.
	Topics []string
	// Fsync makes the broker fsync every produced batch before it
	// acknowledges it. Without it, as with Kafka's defaults, a batch is
	// written to the file (the OS page cache) before it is acknowledged: it
	// survives the broker process being killed, not the machine losing
	// power.
	Fsync  bool
	Logger *slog.Logger
}

// Broker is a running embedded Kafka-protocol broker.
type Broker struct {
	cluster *kfake.Cluster
	lock    *os.File
}

// StartBroker starts the embedded broker.
func StartBroker(cfg BrokerConfig) (*Broker, error) {
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	host, portText, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, errors.Wrapf(err, "kafka listen address %q", cfg.Listen)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, errors.Wrapf(err, "kafka listen port %q", portText)
	}
	b := &Broker{}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, errors.Wrapf(err, "create kafka data directory %s", cfg.DataDir)
		}
		if b.lock, err = lockDataDir(cfg.DataDir); err != nil {
			return nil, err
		}
	}
	opts := []kfake.Opt{
		kfake.Ports(port),
		// kfake binds 127.0.0.1; bind the configured host instead.
		kfake.ListenFn(func(network, address string) (net.Listener, error) {
			_, p, _ := net.SplitHostPort(address)
			return net.Listen(network, net.JoinHostPort(host, p))
		}),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(int(cfg.Partitions)),
		kfake.WithLogger(slogLogger{cfg.Logger}),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(MaxRecordBytes + 1<<20)}),
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
		if cfg.Fsync {
			opts = append(opts, kfake.SyncWrites())
		}
	}
	if len(cfg.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(cfg.Partitions, cfg.Topics...))
	}
	cluster, err := kfake.NewCluster(opts...)
	if err != nil {
		b.Close()
		return nil, errors.Wrapf(err, "start embedded kafka on %s", cfg.Listen)
	}
	b.cluster = cluster
	cfg.Logger.Info("kafka listening", "addr", b.Addrs()[0], "data", cfg.DataDir, "fsync", cfg.Fsync)
	return b, nil
}

// Addrs are the broker's addresses, to use as seed brokers.
func (b *Broker) Addrs() []string { return b.cluster.ListenAddrs() }

// Close stops the broker, saves its state and releases the data directory.
func (b *Broker) Close() {
	if b.cluster != nil {
		b.cluster.Close()
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
