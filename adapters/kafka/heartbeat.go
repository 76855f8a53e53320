package kafka

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
)

// Heartbeats announce agent instances on protocol.AgentsTopic, keyed by
// instance, as CloudEvents of type protocol.AgentHeartbeatMessageType; an
// instance that leaves writes a tombstone under its key. Before its first
// record it creates the topic, compacted, if it can and it does not exist. It
// implements processes.Heartbeats and is safe for concurrent use.
type Heartbeats struct {
	client *kgo.Client
	source string

	mu      sync.Mutex
	ensured bool
}

var _ processes.Heartbeats = (*Heartbeats)(nil)

// NewHeartbeats returns heartbeats produced with client as source (the
// CloudEvents source, e.g. saga/agent/payment).
func NewHeartbeats(client *kgo.Client, source string) *Heartbeats {
	return &Heartbeats{client: client, source: source}
}

// Beat produces a heartbeat and waits until the broker has it.
func (h *Heartbeats) Beat(ctx context.Context, hb protocol.AgentHeartbeat) error {
	body, err := json.Marshal(hb)
	if err != nil {
		return errors.Wrap(err, "encode heartbeat")
	}
	return h.produce(ctx, NewRecord(protocol.AgentsTopic, hb.Instance, protocol.AgentHeartbeatMessageType, h.source, body, ""))
}

// Leave produces the tombstone of an instance (its key with no value) and
// waits until the broker has it.
func (h *Heartbeats) Leave(ctx context.Context, instance string) error {
	rec := NewRecord(protocol.AgentsTopic, instance, protocol.AgentHeartbeatMessageType, h.source, nil, "")
	rec.Value = nil
	return h.produce(ctx, rec)
}

func (h *Heartbeats) produce(ctx context.Context, rec *kgo.Record) error {
	h.mu.Lock()
	if !h.ensured {
		// Best effort: an agent may lack the right to create topics, and
		// saga creates this one where it creates its own.
		ensureCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = EnsureCompactedTopics(ensureCtx, h.client, 1, protocol.AgentsTopic)
		cancel()
		h.ensured = true
	}
	h.mu.Unlock()
	return errors.Wrapf(h.client.ProduceSync(ctx, rec).FirstErr(), "produce to %s", rec.Topic)
}
