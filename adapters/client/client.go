// Package client lets a Go application submit orders to saga and wait for
// their outcome; it is part of saga's public API (docs/api.md). Each Client
// has a private reply topic: the orders it submits name that topic as
// replyTo, and saga sends every status of those tasks there. Statuses
// arrive at least once and are de-duplicated by revision.
//
//	c, err := client.New(ctx, client.Config{Brokers: []string{"127.0.0.1:9092"}})
//	if err != nil { ... }      // ErrUnreachable within ConnectTimeout if Kafka does not answer
//	defer c.Close()            // deletes the reply topic the client created
//	outcome, err := c.Run(ctx, "o-1", map[string]any{"items": items})
//	if errors.Is(err, client.ErrRejected) { ... } // unknown workflow, invalid order: no task
//	if outcome.Final.Status == protocol.StatusProcessed { ... }
package client

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/domain/protocol"
)

// ErrRejected is returned by Wait and Run for an order saga refused: an
// unknown workflow or version, or invalid input. The error says why.
var ErrRejected = errors.New("order rejected")

// Config configures a Client.
type Config struct {
	Brokers []string
	// ReplyTopic receives the statuses; default a new topic named
	// saga.reply.<uuid>, deleted again by Close. A topic given here is read
	// from its start, so it should be private to this client; Close leaves
	// it.
	ReplyTopic string
	// NoReplyTopic makes a client that only submits: it creates no reply
	// topic and sets no replyTo in its orders, so that no status of theirs is sent
	// to a topic deleted meanwhile; Wait and Accepted return
	// ErrNoReplyTopic. ReplyTopic must then be empty.
	NoReplyTopic bool
	// OrdersTopic is where orders go; default protocol.OrdersTopic.
	OrdersTopic string
	// ConnectTimeout bounds how long New waits for Kafka to answer;
	// default 5 s.
	ConnectTimeout time.Duration
	// KafkaOptions are extra franz-go options (TLS, SASL, ...).
	KafkaOptions []kgo.Opt
	// RememberFinished is how many finished orders the client keeps the
	// statuses of, so that Wait still answers for them; older ones are
	// forgotten, so that a long-lived client's memory does not grow with
	// every order it ever ran. Default DefaultRememberFinished.
	RememberFinished int
}

// DefaultRememberFinished is the default of Config.RememberFinished.
const DefaultRememberFinished = 10_000

// maxOrderBytes bounds the records the client produces: orders are at most
// 1 MiB by default, and a sagad may accept up to 16 MiB.
const maxOrderBytes = 16 << 20

// createTopic creates a topic of one partition if it does not exist.
func createTopic(ctx context.Context, kc *kgo.Client, topic string) error {
	resp, err := kadm.NewClient(kc).CreateTopics(ctx, 1, -1, nil, topic)
	if err != nil {
		return errors.Wrapf(err, "create topic %s", topic)
	}
	for _, t := range resp.Sorted() {
		if t.Err != nil && !errors.Is(t.Err, kerr.TopicAlreadyExists) {
			return errors.Wrapf(t.Err, "create topic %s", t.Topic)
		}
	}
	return nil
}

// ErrNoReplyTopic is returned by Wait and Accepted of a client made with
// Config.NoReplyTopic: it receives no statuses.
var ErrNoReplyTopic = errors.New("client has no reply topic")

// ErrUnreachable is returned by New when Kafka does not answer in time.
var ErrUnreachable = errors.New("kafka unreachable")

// Outcome is what became of an order.
type Outcome struct {
	// Final is the status that ended the wait: processed, compensated or
	// failed.
	Final protocol.TaskStatus
	// Statuses are all statuses received, in revision order, without
	// duplicates.
	Statuses []protocol.TaskStatus
}

// Client submits orders and follows them.
type Client struct {
	cfg      Config
	ownTopic bool
	client   *kgo.Client
	cancel   context.CancelFunc
	done     chan struct{}

	mu       sync.Mutex
	statuses map[string]map[uint64]protocol.TaskStatus
	waiters  map[string][]chan struct{}
	received int
	// finished are the orders whose final status has arrived, oldest
	// first, at most cfg.RememberFinished; finishedAt is where the next
	// one goes once the ring is full.
	finished   []string
	finishedAt int
}

// New creates the reply topic if needed and starts following it.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.NoReplyTopic && cfg.ReplyTopic != "" {
		return nil, errors.New("client config: ReplyTopic given with NoReplyTopic")
	}
	ownTopic := cfg.ReplyTopic == "" && !cfg.NoReplyTopic
	if ownTopic {
		cfg.ReplyTopic = "saga.reply." + uuid.NewString()
	}
	if cfg.OrdersTopic == "" {
		cfg.OrdersTopic = protocol.OrdersTopic
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.RememberFinished <= 0 {
		cfg.RememberFinished = DefaultRememberFinished
	}
	opts := cfg.KafkaOptions
	if !cfg.NoReplyTopic {
		opts = append([]kgo.Opt{kgo.ConsumeTopics(cfg.ReplyTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)
	}
	base := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.AllowAutoTopicCreation(),
		kgo.ProducerBatchMaxBytes(maxOrderBytes)}
	kc, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return nil, errors.Wrapf(err, "kafka client for %v", cfg.Brokers)
	}
	pingCtx, cancelPing := context.WithTimeout(ctx, cfg.ConnectTimeout)
	err = kc.Ping(pingCtx)
	cancelPing()
	if err != nil {
		kc.Close()
		return nil, errors.Wrapf(ErrUnreachable, "no answer from %v within %s: %v", cfg.Brokers, cfg.ConnectTimeout, err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c := &Client{cfg: cfg, client: kc, ownTopic: ownTopic, cancel: cancel, done: make(chan struct{}),
		statuses: map[string]map[uint64]protocol.TaskStatus{}, waiters: map[string][]chan struct{}{}}
	if cfg.NoReplyTopic {
		close(c.done)
		return c, nil
	}
	if err := createTopic(ctx, kc, cfg.ReplyTopic); err != nil {
		cancel()
		kc.Close()
		return nil, err
	}
	go c.follow(runCtx)
	return c, nil
}

// ReplyTopic is the topic this client receives statuses on; empty with
// Config.NoReplyTopic.
func (c *Client) ReplyTopic() string { return c.cfg.ReplyTopic }

// Close stops following the reply topic and deletes it if the client
// created it.
func (c *Client) Close() {
	c.cancel()
	<-c.done
	if c.ownTopic {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _ = kadm.NewClient(c.client).DeleteTopics(ctx, c.cfg.ReplyTopic)
		cancel()
	}
	c.client.Close()
}

// Submit publishes an order: fields are the order's JSON fields besides
// orderId and replyTo, which the client sets (replyTo only when it has a
// reply topic).
func (c *Client) Submit(ctx context.Context, orderID string, fields map[string]any) error {
	order := map[string]any{}
	for k, v := range fields {
		order[k] = v
	}
	order["orderId"] = orderID
	if !c.cfg.NoReplyTopic {
		order["replyTo"] = c.cfg.ReplyTopic
	}
	body, err := json.Marshal(order)
	if err != nil {
		return errors.Wrap(err, "encode order")
	}
	hs := protocol.Headers(protocol.OrderPlacedMessageType, "saga/client", orderID, "", time.Now())
	rec := &kgo.Record{Topic: c.cfg.OrdersTopic, Key: []byte(orderID), Value: body, Headers: make([]kgo.RecordHeader, len(hs))}
	for i, h := range hs {
		rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)}
	}
	return errors.Wrapf(c.client.ProduceSync(ctx, rec).FirstErr(), "publish order %s", orderID)
}

// Wait blocks until the order reaches processed, compensated or failed, or
// ctx ends. A rejected order is ErrRejected.
func (c *Client) Wait(ctx context.Context, orderID string) (Outcome, error) {
	return c.waitFor(ctx, orderID, func(o Outcome) bool { return o.Final.Status != "" })
}

// Accepted blocks until saga has accepted the order as a task (its
// received status) or refused it (ErrRejected), or ctx ends.
func (c *Client) Accepted(ctx context.Context, orderID string) (Outcome, error) {
	return c.waitFor(ctx, orderID, func(o Outcome) bool { return len(o.Statuses) > 0 })
}

// waitFor blocks until done holds for what is known of the order.
func (c *Client) waitFor(ctx context.Context, orderID string, done func(Outcome) bool) (Outcome, error) {
	if c.cfg.NoReplyTopic {
		return Outcome{}, errors.Wrapf(ErrNoReplyTopic, "wait for order %s", orderID)
	}
	for {
		c.mu.Lock()
		outcome := c.outcome(orderID)
		var ch chan struct{}
		finished := done(outcome)
		if !finished {
			ch = make(chan struct{})
			c.waiters[orderID] = append(c.waiters[orderID], ch)
		}
		c.mu.Unlock()
		if outcome.Final.Status == protocol.StatusRejected {
			return outcome, errors.Wrapf(ErrRejected, "order %s: %s", orderID, outcome.Final.Reason)
		}
		if finished {
			return outcome, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return outcome, errors.Wrapf(ctx.Err(), "wait for order %s", orderID)
		}
	}
}

// Run submits an order and waits for its outcome.
func (c *Client) Run(ctx context.Context, orderID string, fields map[string]any) (Outcome, error) {
	if err := c.Submit(ctx, orderID, fields); err != nil {
		return Outcome{}, err
	}
	return c.Wait(ctx, orderID)
}

// Received counts the status messages received, duplicates included.
func (c *Client) Received() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.received
}

// outcome assembles what is known of an order. The caller holds mu.
func (c *Client) outcome(orderID string) Outcome {
	var out Outcome
	for _, s := range c.statuses[orderID] {
		out.Statuses = append(out.Statuses, s)
	}
	sort.Slice(out.Statuses, func(i, j int) bool { return out.Statuses[i].Revision < out.Statuses[j].Revision })
	if n := len(out.Statuses); n > 0 && out.Statuses[n-1].Final() {
		out.Final = out.Statuses[n-1]
	}
	return out
}

// rememberFinished notes that an order's final status arrived, and
// forgets the statuses of the oldest finished order once more than
// cfg.RememberFinished are kept. The caller holds mu.
func (c *Client) rememberFinished(orderID string) {
	if len(c.finished) < c.cfg.RememberFinished {
		c.finished = append(c.finished, orderID)
		return
	}
	delete(c.statuses, c.finished[c.finishedAt])
	c.finished[c.finishedAt] = orderID
	c.finishedAt = (c.finishedAt + 1) % len(c.finished)
}

// Remembered is how many orders the client holds statuses of: those in
// flight and at most Config.RememberFinished finished ones.
func (c *Client) Remembered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.statuses)
}

func (c *Client) follow(ctx context.Context) {
	defer close(c.done)
	for {
		fetches := c.client.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return
		}
		fetches.EachRecord(func(r *kgo.Record) {
			st, err := protocol.ParseTaskStatus(r.Value)
			if err != nil {
				return // not a status: ignore
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			c.received++
			known := c.statuses[st.OrderID]
			if known == nil {
				known = map[uint64]protocol.TaskStatus{}
				c.statuses[st.OrderID] = known
			}
			_, seen := known[st.Revision]
			known[st.Revision] = st
			if st.Final() && !seen {
				c.rememberFinished(st.OrderID)
			}
			for _, ch := range c.waiters[st.OrderID] {
				close(ch)
			}
			delete(c.waiters, st.OrderID)
		})
	}
}
