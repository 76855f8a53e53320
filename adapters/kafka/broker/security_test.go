package broker_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/adapters/secure"
	"github.com/sagaengine/saga/domain/protocol"
)

// startSecureBroker starts a broker that requires TLS and SCRAM, with
// durable acknowledgements of the orders topic.
func startSecureBroker(t *testing.T) (*broker.Broker, *secure.Files) {
	t.Helper()
	files, err := secure.Prepare(filepath.Join(t.TempDir(), "secure"))
	require.NoError(t, err)
	tlsCfg, err := files.ServerTLS()
	require.NoError(t, err)
	users, err := files.KafkaUsers()
	require.NoError(t, err)
	b, err := broker.Start(broker.Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 1, Topics: []string{protocol.OrdersTopic},
		TLS: tlsCfg, Users: users, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b, files
}

func produceWith(t *testing.T, b *broker.Broker, sec kafka.Security) error {
	t.Helper()
	opts, err := sec.Opts()
	require.NoError(t, err)
	client, err := kafka.NewClient(b.Addrs(), append(opts, kgo.RetryTimeout(3*time.Second), kgo.RequestRetries(1))...)
	require.NoError(t, err)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx); err != nil {
		return err
	}
	return client.ProduceSync(ctx, &kgo.Record{Topic: protocol.OrdersTopic, Key: []byte("k"), Value: []byte("v")}).FirstErr()
}

// TestBrokerTLSAndSCRAM produces a synced record over TLS with SCRAM (the
// durable-ack layer reads the decrypted frames), and refuses a plaintext
// client, a wrong password and a client that trusts another CA.
func TestBrokerTLSAndSCRAM(t *testing.T) {
	b, files := startSecureBroker(t)
	good := files.KafkaSecurity()
	require.NoError(t, produceWith(t, b, good), "TLS + SCRAM-SHA-256")
	sha512 := good
	sha512.SASLMechanism = kafka.SASLScramSHA512
	require.NoError(t, produceWith(t, b, sha512), "TLS + SCRAM-SHA-512")
	assert.Positive(t, broker.SyncRounds(b), "the orders record was fsynced before its ack")

	plainErr := produceWith(t, b, kafka.Security{})
	require.Error(t, plainErr, "plaintext client")
	assert.Contains(t, plainErr.Error(), "is TLS missing?")

	wrong := good
	wrong.SASLPasswordFile = ""
	wrong.SASLPassword = "not-the-password"
	err := wrong.Explain(produceWith(t, b, wrong))
	t.Log("wrong password:", err)
	require.ErrorIs(t, err, kafka.ErrAuthenticationFailed, "wrong password")
	assert.Contains(t, err.Error(), "check SASL SCRAM-SHA-256 user \"saga\"")
	assert.NotContains(t, err.Error(), "not-the-password")

	other, err := secure.Prepare(filepath.Join(t.TempDir(), "other"))
	require.NoError(t, err)
	wrongCA := good
	wrongCA.CAFile = other.CA
	err = produceWith(t, b, wrongCA)
	require.Error(t, err, "wrong CA")
	assert.Contains(t, err.Error(), "certificate signed by unknown authority")
}
