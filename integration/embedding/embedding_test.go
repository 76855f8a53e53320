// Package embedding_test is a Go service that embeds saga, as a user would
// write it: it imports only saga's public packages (docs/api.md).
package embedding_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/agent"
	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// payments is the embedding service's own remote service, with a record of
// what it was asked to refund.
type payments struct {
	mu       sync.Mutex
	charged  map[string]string // idempotency key to payment id
	refunded []string
}

func (p *payments) charge(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.charged[key]; ok {
		return id // the same key, the same payment
	}
	id := "pay-" + key
	p.charged[key] = id
	return id
}

func (p *payments) refund(id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, known := range p.charged {
		if known == id {
			p.refunded = append(p.refunded, id)
			return nil
		}
	}
	return errors.New("no payment " + id)
}

// checkout is the workflow, in Go: charge, then ship; a charge is refunded
// when shipping is refused.
var checkout = &domain.Workflow{Name: "checkout", Steps: []domain.StepDefinition{
	{Name: "charge", Agent: "payments", Budget: 5 * time.Second, MaxAttempts: 3, Backoff: domain.DefaultBackoff,
		Compensation: &domain.CompensationDefinition{Action: "refund", Budget: 5 * time.Second, MaxAttempts: 3, Backoff: domain.DefaultBackoff}},
	{Name: "ship", Agent: "shipping", Budget: 5 * time.Second, MaxAttempts: 3, Backoff: domain.DefaultBackoff},
}}

func TestEmbeddedSagaWithGoAgents(t *testing.T) {
	pay := &payments{charged: map[string]string{}}
	var shippedWith sync.Map
	handlers := map[string]agent.Handler{
		"payments": func(ctx context.Context, req agent.Request) (any, error) {
			if req.Compensating() {
				var charged struct{ PaymentID string }
				if err := req.DecodeUndone(&charged); err != nil {
					return nil, agent.Permanent(err)
				}
				return nil, pay.refund(charged.PaymentID)
			}
			return map[string]string{"paymentId": pay.charge(req.IdempotencyKey)}, nil
		},
		"shipping": func(ctx context.Context, req agent.Request) (any, error) {
			var order struct{ Country string }
			if err := req.DecodeOrder(&order); err != nil {
				return nil, agent.Permanent(err)
			}
			var charged struct{ PaymentID string }
			if err := req.DecodeResult("charge", &charged); err != nil {
				return nil, agent.Permanent(err)
			}
			if order.Country == "Atlantis" {
				return nil, agent.Permanent(errors.New("we do not ship to Atlantis"))
			}
			shippedWith.Store(req.TaskID, charged.PaymentID)
			return map[string]string{"parcel": "parcel-" + req.TaskID}, nil
		},
	}
	saga, err := engine.Start(engine.Config{
		DataDir: t.TempDir(), KafkaListen: "127.0.0.1:0", EventStoreListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Workflows: []*domain.Workflow{checkout}, Agents: handlers,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	require.NoError(t, err)
	defer saga.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	callers, err := client.New(ctx, client.Config{Brokers: saga.KafkaBrokers})
	require.NoError(t, err)
	defer callers.Close()

	done, err := callers.Run(ctx, "c-1", map[string]any{"workflow": "checkout", "country": "France"})
	require.NoError(t, err)
	assert.Equal(t, protocol.StatusProcessed, done.Final.Status)
	paid, _ := shippedWith.Load("c-1")
	assert.Equal(t, "pay-c-1/charge", paid, "shipping received the charge's result")

	undone, err := callers.Run(ctx, "c-2", map[string]any{"workflow": "checkout", "country": "Atlantis"})
	require.NoError(t, err)
	assert.Equal(t, protocol.StatusCompensated, undone.Final.Status)
	assert.Equal(t, []string{"pay-c-2/charge"}, pay.refunded, "the refund received the charge's result")

	resp, err := http.Get("http://" + saga.HTTPAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	metrics, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, want := range []string{`saga_agent_commands_total{agent="payments",outcome="succeeded"} 3`,
		`saga_agent_commands_total{agent="shipping",outcome="succeeded"} 1`,
		`saga_agent_commands_total{agent="shipping",outcome="failed"} 1`} {
		assert.True(t, strings.Contains(string(metrics), want), "metrics lack %s", want)
	}
}
