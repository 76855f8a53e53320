package kafka

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// CloudEvents Kafka binding (binary mode) header names, and saga's own,
// from the wire protocol.
const (
	HeaderSpecVersion      = protocol.HeaderSpecVersion
	HeaderID               = protocol.HeaderID
	HeaderSource           = protocol.HeaderSource
	HeaderType             = protocol.HeaderType
	HeaderTime             = protocol.HeaderTime
	HeaderSubject          = protocol.HeaderSubject
	HeaderContentType      = protocol.HeaderContentType
	HeaderTraceParent      = protocol.HeaderTraceParent
	HeaderDeadLetterReason = protocol.HeaderDeadLetterReason
	HeaderDeadLetterSource = protocol.HeaderDeadLetterSource
	HeaderDeadLetterSize   = protocol.HeaderDeadLetterSize
)

// Producer sends saga's messages. It implements the processes'
// CommandSender, ReplySender and DeadLetters ports.
type Producer struct {
	client *kgo.Client
	// source is the CloudEvents source of the messages, e.g. saga/scheduler-1.
	source string
	logger *slog.Logger

	mu        sync.Mutex
	statusErr error
	// replyTopics are the reply topics statuses went to since the last
	// Flush, lastReplyTopics those of the flush interval before: Flush
	// purges from the client the topics of that one no status went to
	// since.
	replyTopics, lastReplyTopics map[string]struct{}
	// undeliverable counts statuses a reply topic refused.
	undeliverable atomic.Int64
	// noBarrier says the broker has no sync barrier topic (logged once).
	noBarrier atomic.Bool

	// MaxDeadLetterBytes bounds the records DeadLetter copies whole;
	// default DefaultMaxDeadLetterBytes. Set it before the producer is used.
	MaxDeadLetterBytes int
}

// UndeliverableStatuses counts the statuses an order's reply topic refused
// (missing, not allowed, too large): each was logged and dead-lettered.
func (p *Producer) UndeliverableStatuses() int64 { return p.undeliverable.Load() }

// NewProducer returns a producer writing as source.
func NewProducer(client *kgo.Client, source string, logger *slog.Logger) *Producer {
	if logger == nil {
		logger = slog.Default()
	}
	return &Producer{client: client, source: source, logger: logger}
}

var (
	_ processes.CommandSender = (*Producer)(nil)
	_ processes.ReplySender   = (*Producer)(nil)
	_ processes.DeadLetters   = (*Producer)(nil)
)

// Record builds a CloudEvents binary-mode record with a JSON body.
func (p *Producer) Record(topic, key, ceType string, body []byte) *kgo.Record {
	return p.TracedRecord(topic, key, ceType, body, "")
}

// TracedRecord is Record with W3C trace context: traceparent as given (the
// sender's span), or a new trace when it is empty or invalid.
func (p *Producer) TracedRecord(topic, key, ceType string, body []byte, parent string) *kgo.Record {
	return NewRecord(topic, key, ceType, p.source, body, parent)
}

// NewRecord builds a saga message: a CloudEvents binary-mode record with a
// JSON body and parent as its traceparent (protocol.Headers).
func NewRecord(topic, key, ceType, source string, body []byte, parent string) *kgo.Record {
	// The key and the header values share one buffer: one allocation
	// rather than one each.
	buf := append(make([]byte, 0, len(key)+protocol.HeaderValuesSize(ceType, source, key)), key...)
	buf, ends := protocol.AppendHeaderValues(buf, ceType, source, key, parent, time.Now())
	rec := &kgo.Record{Topic: topic, Key: buf[:len(key):len(key)], Value: body, Headers: make([]kgo.RecordHeader, len(ends))}
	start := len(key)
	for i, end := range ends {
		rec.Headers[i] = kgo.RecordHeader{Key: protocol.HeaderKeys[i], Value: buf[start:end:end]}
		start = end
	}
	return rec
}

// SendCommand produces cmd to its agent's topic of the command's priority
// (protocol.CommandTopicFor), to the topic and partition of its route when
// the scheduler chose an instance, else of its task id, without waiting: the
// dispatch is already recorded, and a lost command is re-sent on restart or
// retried once its CompleteBy passes.
func (p *Producer) SendCommand(_ context.Context, cmd protocol.ExecuteStep) error {
	body, err := protocol.AppendExecuteStep(make([]byte, 0, 512+len(cmd.Order)), cmd)
	if err != nil {
		return errors.Wrap(err, "encode command")
	}
	topic := protocol.CommandTopicFor(cmd.Agent, cmd.Priority)
	if cmd.Route != nil && cmd.Route.Topic != "" {
		topic = cmd.Route.Topic
	}
	rec := p.TracedRecord(topic, cmd.TaskID, protocol.ExecuteStepMessageType, body, cmd.TraceParent)
	if cmd.Route != nil {
		routeTo(rec, cmd.Route.Partition)
	}
	p.client.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
		if err != nil {
			p.logger.Error("produce command", "topic", r.Topic, "task", cmd.TaskID, "step", cmd.Step, "err", err.Error())
		}
	})
	return nil
}

// SendReply produces a reply and waits until the broker has it.
func (p *Producer) SendReply(ctx context.Context, reply protocol.StepReply) error {
	body, err := encodeReply(reply)
	if err != nil {
		return errors.Wrap(err, "encode reply")
	}
	return p.produceSync(ctx, p.TracedRecord(protocol.RepliesTopic, reply.TaskID, protocol.StepReplyMessageType, body, reply.TraceParent))
}

// encodeReply encodes reply into a buffer sized for it at once.
func encodeReply(reply protocol.StepReply) ([]byte, error) {
	return protocol.AppendStepReply(make([]byte, 0, 384+len(reply.Result)+len(reply.Reason)), reply)
}

// DeadLetter copies msg, byte for byte with its headers, to the dead-letter
// topic with the reason and its origin, and waits until the broker has it.
// A record over MaxDeadLetterBytes, or one the broker refuses as too large,
// is dead-lettered by reference instead (its source, size, first bytes and
// the reason): a message too large to copy must not be retried forever and
// hold up the messages after it.
func (p *Producer) DeadLetter(ctx context.Context, msg processes.Inbound, reason string) error {
	headers := make([]kgo.RecordHeader, 0, len(msg.Headers))
	for _, h := range msg.Headers {
		headers = append(headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}
	rec, byRef := deadLetterRecord([]byte(msg.Key), msg.Value, headers, reason, msg.Source(), p.maxDeadLetterBytes(), false)
	err := p.produceSync(ctx, rec)
	if tooLarge(err) && !byRef {
		p.logger.Warn("dead letter too large for the broker; dead-lettered by reference", "source", msg.Source(), "size", len(msg.Value))
		rec, _ = deadLetterRecord([]byte(msg.Key), msg.Value, headers, reason, msg.Source(), 0, true)
		err = p.produceSync(ctx, rec)
	}
	return err
}

func (p *Producer) maxDeadLetterBytes() int {
	if p.MaxDeadLetterBytes > 0 {
		return p.MaxDeadLetterBytes
	}
	return DefaultMaxDeadLetterBytes
}

// tooLarge reports whether a produce failed because the record is too
// large for the client or the broker.
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// Publish produces a ready-made record and waits until the broker has it.
func (p *Producer) Publish(ctx context.Context, rec *kgo.Record) error {
	return p.produceSync(ctx, rec)
}

func (p *Producer) produceSync(ctx context.Context, rec *kgo.Record) error {
	return errors.Wrapf(p.client.ProduceSync(ctx, rec).FirstErr(), "produce to %s", rec.Topic)
}

// RaiseAlert produces an alert, raised or resolved, to the alerts topic
// and waits until the broker has it.
func (p *Producer) RaiseAlert(ctx context.Context, a protocol.Alert) error {
	body, err := json.Marshal(a)
	if err != nil {
		return errors.Wrap(err, "encode alert")
	}
	return p.produceSync(ctx, p.Record(protocol.AlertsTopic, a.TaskID, a.MessageType(), body))
}

var _ processes.Alerts = (*Producer)(nil)

// PublishStatus produces a status message to the status topic and, if the
// order named one, to its reply topic, without waiting.
//
// A status the reply topic refuses once the client's bounded retries are
// spent is counted, logged and dead-lettered with the reason, and does not
// make Flush fail: one caller's broken reply topic must not hold up
// saga.status and every other task's statuses. A status saga.status refuses
// does make Flush fail, so the publisher sends it again.
func (p *Producer) PublishStatus(_ context.Context, st protocol.TaskStatus) {
	body, err := protocol.AppendTaskStatus(make([]byte, 0, 256+len(st.Result)), st)
	if err != nil {
		p.failStatus(err)
		return
	}
	topics := []string{protocol.StatusTopic}
	if st.ReplyTo != "" {
		topics = append(topics, st.ReplyTo)
		p.mu.Lock()
		if p.replyTopics == nil {
			p.replyTopics = map[string]struct{}{}
		}
		p.replyTopics[st.ReplyTo] = struct{}{}
		p.mu.Unlock()
	}
	for _, topic := range topics {
		rec := p.TracedRecord(topic, st.OrderID, protocol.StatusMessageType, body, st.TraceParent)
		p.client.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
			switch {
			case err == nil:
			case r.Topic != protocol.StatusTopic:
				p.undeliverableStatus(r, st, err)
			default:
				p.logger.Error("produce status", "topic", r.Topic, "order", st.OrderID, "err", err.Error())
				p.failStatus(err)
			}
		})
	}
}

// undeliverableStatus dead-letters a status its reply topic refused. It
// runs in a produce callback, so it must not wait: a dead letter that finds
// the client's buffer full is only logged.
func (p *Producer) undeliverableStatus(r *kgo.Record, st protocol.TaskStatus, cause error) {
	p.undeliverable.Add(1)
	reason := "status undeliverable to reply topic " + r.Topic + ": " + cause.Error()
	p.logger.Warn("status dead-lettered", "order", st.OrderID, "revision", st.Revision, "reason", reason)
	// A status the reply topic refused as too large is dead-lettered by
	// reference: its copy would be refused too.
	dead, _ := deadLetterRecord(r.Key, r.Value, r.Headers, reason, "status/"+r.Topic, p.maxDeadLetterBytes(), tooLarge(cause))
	p.client.TryProduce(context.Background(), dead, func(_ *kgo.Record, err error) {
		if err != nil {
			p.logger.Error("dead-letter an undeliverable status", "order", st.OrderID, "err", err.Error())
		}
	})
}

func (p *Producer) failStatus(err error) {
	p.mu.Lock()
	if p.statusErr == nil {
		p.statusErr = err
	}
	p.mu.Unlock()
}

// Flush waits until the broker has every status published so far, on
// stable storage, and reports (once) whether one could not be delivered.
//
// Status and reply topics are not fsynced record by record: once the
// broker has acknowledged every status, Flush produces a sync barrier
// (protocol.SyncBarrierTopic), which the embedded broker acknowledges only
// once everything it acknowledged before is fsynced. The status publisher
// saves its checkpoint only after Flush, so a power loss can take back only
// statuses that it publishes again from that checkpoint. A real Kafka keeps
// them by replication, as every other record, and stores the barrier as
// an ordinary record.
func (p *Producer) Flush(ctx context.Context) error {
	if err := p.client.Flush(ctx); err != nil {
		return errors.Wrap(err, "flush")
	}
	p.mu.Lock()
	err := p.statusErr
	p.statusErr = nil
	var idle []string
	for topic := range p.lastReplyTopics {
		if _, again := p.replyTopics[topic]; !again {
			idle = append(idle, topic)
		}
	}
	p.lastReplyTopics, p.replyTopics = p.replyTopics, nil
	p.mu.Unlock()
	if len(idle) > 0 {
		// A topic the client knows stays in its every metadata request
		// until it is purged. Orders with distinct reply topics made the
		// status publisher's client know thousands, more than the
		// embedded broker may hold at once: every metadata request then
		// named topics the broker does not have, each such load was
		// retried, and the first load of every new reply topic waited
		// behind them, seconds per flush. So a reply topic no status went
		// to for a whole flush interval is forgotten (nothing is in flight
		// here: the client is flushed and the publisher waits on this
		// call); a topic in steady use (a service's one reply topic) stays
		// known, and a forgotten one is loaded again by its next status.
		p.client.PurgeTopicsFromClient(idle...)
	}
	if err != nil {
		return err
	}
	err = p.produceSync(ctx, p.Record(protocol.SyncBarrierTopic, p.source, protocol.SyncBarrierMessageType, nil))
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		// saga creates the topic at start, and the embedded broker at its
		// own; a real Kafka without it (created by an older saga, topics
		// not ours to create) keeps statuses by replication anyway.
		if p.noBarrier.CompareAndSwap(false, true) {
			p.logger.Warn("no sync barrier topic: statuses are as durable as the broker makes every record", "topic", protocol.SyncBarrierTopic)
		}
		return nil
	}
	return err
}

var _ processes.StatusSink = (*Producer)(nil)

// ForgetReplyTopics drops the client's metadata of reply topics no status
// is pending for (processes.ReplyTopicForgetter): a client refreshes every
// topic it knows, and its refresh would make a broker that auto-creates
// topics create again a reply topic deleted once idle. A status sent to one
// later loads it again.
func (p *Producer) ForgetReplyTopics(topics []string) {
	p.client.PurgeTopicsFromClient(topics...)
}

var _ processes.ReplyTopicForgetter = (*Producer)(nil)
