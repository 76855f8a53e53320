package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/engine"
)

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

func startSaga(dir string) (*engine.App, error) {
	return engine.Start(engine.Config{DataDir: dir, KafkaListen: "127.0.0.1:0", EventStoreListen: "127.0.0.1:0",
		HTTPListen: "127.0.0.1:0", DemoAgents: true, Logger: quiet()})
}

// Submit orders to the demo workflow and wait for their outcome; an order
// saga refuses is reported at once.
func ExampleClient_Run() {
	dir, _ := os.MkdirTemp("", "saga-example-")
	defer os.RemoveAll(dir)
	saga, err := startSaga(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer saga.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Brokers: saga.KafkaBrokers})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close() // deletes the client's private reply topic

	outcome, err := c.Run(ctx, "o-1", map[string]any{"items": []string{"book"}})
	fmt.Println(outcome.Final.Status, err)
	_, err = c.Run(ctx, "o-2", map[string]any{"workflow": "teleport"})
	fmt.Println(errors.Is(err, client.ErrRejected))
	// Output:
	// processed <nil>
	// true
}

func TestCloseDeletesTheReplyTopicItCreated(t *testing.T) {
	saga, err := startSaga(t.TempDir())
	require.NoError(t, err)
	defer saga.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Brokers: saga.KafkaBrokers})
	require.NoError(t, err)
	_, err = c.Run(ctx, "t-1", nil)
	require.NoError(t, err)
	own := c.ReplyTopic()

	kept, err := client.New(ctx, client.Config{Brokers: saga.KafkaBrokers, ReplyTopic: "saga.reply.kept"})
	require.NoError(t, err)
	kept.Close()
	c.Close()

	admin, err := kgo.NewClient(kgo.SeedBrokers(saga.KafkaBrokers...))
	require.NoError(t, err)
	defer admin.Close()
	topics, err := kadm.NewClient(admin).ListTopics(ctx)
	require.NoError(t, err)
	assert.False(t, topics.Has(own), "the client's own reply topic %s is gone", own)
	assert.True(t, topics.Has("saga.reply.kept"), "a reply topic the caller named is left alone")
}

func TestNewFailsFastWhenKafkaIsUnreachable(t *testing.T) {
	started := time.Now()
	_, err := client.New(context.Background(), client.Config{Brokers: []string{"127.0.0.1:1"}, ConnectTimeout: time.Second})
	require.ErrorIs(t, err, client.ErrUnreachable)
	assert.True(t, strings.Contains(err.Error(), "127.0.0.1:1"), err.Error())
	assert.Less(t, time.Since(started), 5*time.Second)
}

// TestClientForgetsTheOldestFinishedOrders: a long-lived client keeps the
// statuses of at most RememberFinished finished orders, so its memory does
// not grow with every order it ran; the newest still answer Wait.
func TestClientForgetsTheOldestFinishedOrders(t *testing.T) {
	saga, err := startSaga(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(saga.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Brokers: saga.KafkaBrokers, RememberFinished: 5})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	for i := range 20 {
		out, err := c.Run(ctx, fmt.Sprintf("forget-%02d", i), map[string]any{"items": []string{"book"}})
		require.NoError(t, err)
		require.Equal(t, "processed", out.Final.Status)
	}
	assert.LessOrEqual(t, c.Remembered(), 5, "finished orders beyond the bound are forgotten")
	out, err := c.Wait(ctx, "forget-19")
	require.NoError(t, err, "the newest finished order still answers")
	assert.Equal(t, "processed", out.Final.Status)
}
