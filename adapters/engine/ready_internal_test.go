package engine

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/processes"
)

// TestMembershipNeedsThisProcessInEveryGroup: the consumers check fails,
// naming the group, until a consumer of this process is a member of it;
// another process's member does not count; and it fails again once this
// process's consumer has left.
func TestMembershipNeedsThisProcessInEveryGroup(t *testing.T) {
	broker, err := Start(Config{DataDir: t.TempDir(), KafkaListen: "127.0.0.1:0", Roles: []Role{RoleBroker}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer broker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const group = "saga-membership-test"
	this := &App{client: broker.client, memberTag: newMemberTag()}
	this.addGroup(group)
	other := &App{client: broker.client, memberTag: newMemberTag()}
	other.addGroup(group)
	require.ErrorContains(t, this.checkMembership(ctx), group, "no member yet")

	consumeCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- kafka.Consume(consumeCtx, kafka.ConsumerConfig{Brokers: broker.KafkaBrokers, Group: group, Topics: []string{"membership-test"},
			Logger: slog.New(slog.DiscardHandler), Opts: []kgo.Opt{kgo.ClientID(this.consumerClientID(group))}},
			func(context.Context, processes.Inbound) error { return nil })
	}()
	require.Eventually(t, func() bool { return this.checkMembership(ctx) == nil }, 30*time.Second, 20*time.Millisecond)
	assert.ErrorContains(t, other.checkMembership(ctx), group, "another process's member is not this one")
	stop()
	require.NoError(t, <-done)
	require.Eventually(t, func() bool { return this.checkMembership(ctx) != nil }, 30*time.Second, 20*time.Millisecond,
		"a consumer that left is no member")
}
