package kafka

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"

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
	// Concurrency bounds how many records are handled at once; records with
	// the same key are always handled one after another. Default 256.
	Concurrency int
	Logger      *slog.Logger
	// Opts are extra client options.
	Opts []kgo.Opt
}

// Consume runs handler over the topics as a member of the consumer group
// until ctx ends. Each polled batch is handled (same key in order, different
// keys concurrently) and its offsets committed only once every record of it
// has been handled, so a crash redelivers rather than loses. A handler error
// is retried with backoff.
func Consume(ctx context.Context, cfg ConsumerConfig, handler Handler) error {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 256
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.AllowAutoTopicCreation(),
	}, cfg.Opts...)
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return errors.Wrapf(err, "kafka consumer %s", cfg.Group)
	}
	defer func() {
		// With BlockRebalanceOnPoll, Close waits for a blocked rebalance.
		client.AllowRebalance()
		client.Close()
	}()
	for {
		fetches := client.PollRecords(ctx, 4096)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			cfg.Logger.Warn("kafka fetch", "group", cfg.Group, "topic", topic, "partition", partition, "err", err.Error())
		})
		records := fetches.Records()
		if len(records) > 0 {
			handleBatch(ctx, records, handler, cfg)
			if ctx.Err() != nil {
				return nil // unhandled records are redelivered after restart
			}
			if err := client.CommitRecords(ctx, records...); err != nil && ctx.Err() == nil {
				cfg.Logger.Warn("commit offsets", "group", cfg.Group, "err", err.Error())
			}
		}
		client.AllowRebalance()
	}
}

// handleBatch handles records grouped by key: one goroutine per key, at
// most cfg.Concurrency at once, records of a key in offset order.
func handleBatch(ctx context.Context, records []*kgo.Record, handler Handler, cfg ConsumerConfig) {
	var order []string
	byKey := map[string][]*kgo.Record{}
	for _, r := range records {
		k := r.Topic + "\x00" + string(r.Key)
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	sem := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	for _, k := range order {
		sem <- struct{}{}
		wg.Add(1)
		go func(recs []*kgo.Record) {
			defer func() { <-sem; wg.Done() }()
			for _, r := range recs {
				handleWithRetry(ctx, r, handler, cfg)
			}
		}(byKey[k])
	}
	wg.Wait()
}

func handleWithRetry(ctx context.Context, r *kgo.Record, handler Handler, cfg ConsumerConfig) {
	msg := inbound(r)
	for try := 1; ctx.Err() == nil; try++ {
		err := handler(ctx, msg)
		if err == nil || ctx.Err() != nil {
			return
		}
		wait := processes.DefaultBackoff.Delay(try, rand.Float64())
		cfg.Logger.Warn("handler failed; retrying", "group", cfg.Group, "source", msg.Source(), "try", try, "in", wait, "err", err.Error())
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
}

func inbound(r *kgo.Record) processes.Inbound {
	headers := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		headers[h.Key] = string(h.Value)
	}
	return processes.Inbound{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Value: r.Value, Headers: headers}
}
