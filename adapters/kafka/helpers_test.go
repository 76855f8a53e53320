package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
)

// newClient is a client of saga's defaults on b, closed with the test.
func newClient(t testing.TB, b *broker.Broker, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	client, err := kafka.NewClient(b.Addrs(), opts...)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	return client
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
