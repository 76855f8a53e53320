package port

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// Inbound is a message from a topic, as a handler sees it. A message
// handed over inside the process instead (InProcess) has no partition or
// offset: both are -1.
type Inbound struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Value     []byte
	Headers   Headers
}

// Headers are a message's headers, in the order they came (a Kafka
// record may repeat a key).
type Headers []protocol.Header

// Get returns the value of the last header named key, as a map built from
// the headers would hold it; "" when there is none.
func (hs Headers) Get(key string) string {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == key {
			return hs[i].Value
		}
	}
	return ""
}

// Source names where a message came from, for causation ids and logs.
func (m Inbound) Source() string {
	if m.InProcess() {
		return m.Topic + "/in-process"
	}
	return m.Topic + "/" + strconv.FormatInt(int64(m.Partition), 10) + "/" + strconv.FormatInt(m.Offset, 10)
}

// InProcess reports whether the message was handed over inside the
// process rather than consumed from its topic.
func (m Inbound) InProcess() bool { return m.Offset < 0 }

// InProcessMessage is the Inbound of a message of topic handed over inside
// the process, carrying traceparent as consumed messages carry it.
func InProcessMessage(topic, key, traceparent string) Inbound {
	return Inbound{Topic: topic, Partition: -1, Offset: -1, Key: key, Headers: Headers{{Key: protocol.HeaderTraceParent, Value: traceparent}}}
}

// AgentDirectory knows the agent instances that announce themselves with
// heartbeats (protocol.AgentsTopic).
type AgentDirectory interface {
	// Instances returns the last heartbeat of every instance of agent
	// that is live at now, in a stable order; none for an agent that
	// sends no heartbeats.
	Instances(agent string, now time.Time) []protocol.AgentHeartbeat
}

// Heartbeats announce agent instances on protocol.AgentsTopic.
type Heartbeats interface {
	// Beat publishes an instance's heartbeat and waits until the broker
	// has it.
	Beat(ctx context.Context, hb protocol.AgentHeartbeat) error
	// Leave removes a stopped instance: a tombstone under its key.
	Leave(ctx context.Context, instance string) error
}

// ReplySender delivers agents' replies to the scheduler.
type ReplySender interface {
	SendReply(ctx context.Context, reply protocol.StepReply) error
}

// ReplySenderFunc is a ReplySender that is a function.
type ReplySenderFunc func(ctx context.Context, reply protocol.StepReply) error

// SendReply calls f.
func (f ReplySenderFunc) SendReply(ctx context.Context, reply protocol.StepReply) error {
	return f(ctx, reply)
}

// DeadLetters keeps messages that cannot be processed, with the reason, so
// nothing is lost.
type DeadLetters interface {
	DeadLetter(ctx context.Context, msg Inbound, reason string) error
}

// DefaultBackoff spaces an agent's retries and a consumer's redeliveries:
// from 50 ms, doubling up to 2 s, half of each wait random.
var DefaultBackoff = domain.Backoff{Initial: 50 * time.Millisecond, Multiplier: 2, Max: 2 * time.Second, Jitter: 0.5}

// Wait returns how long to wait before retry n (from 1) of b, with fresh
// jitter.
func Wait(b domain.Backoff, n int) time.Duration { return b.Delay(n, rand.Float64()) }
