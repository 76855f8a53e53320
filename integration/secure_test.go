package integration_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/secure"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// secureSystem starts the whole saga in secure mode, as sagad --secure
// does, with every log line going to logs. A non-admin event-store user
// "reader" (password readerPassword) is added to the generated users file.
func secureSystem(t *testing.T, logs *lockedBuffer) (*system, *secure.Files) {
	t.Helper()
	dir := t.TempDir()
	files, err := secure.Prepare(filepath.Join(dir, "secure"))
	require.NoError(t, err)
	hash, err := esdbserver.HashPassword(readerPassword)
	require.NoError(t, err)
	users, err := os.OpenFile(files.EventStoreUsers, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fmt.Fprintln(users, esdbserver.FormatUser(esdbserver.User{Name: "reader", Hash: hash}))
	require.NoError(t, err)
	require.NoError(t, users.Close())

	cfg := engine.Config{DataDir: dir, Secure: true, DemoAgents: true, SupervisorInterval: 50 * time.Millisecond,
		KafkaListen: "127.0.0.1:0", EventStoreListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
		Workflows: []*domain.Workflow{fastWorkflow(5 * time.Second)},
		Logger:    slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	s := &system{t: t, cfg: cfg}
	s.start()
	t.Cleanup(s.stop)
	require.Equal(t, files.CA, s.app.Secure.CA, "the engine reused the prepared files")
	return s, files
}

const readerPassword = "reader-password-0123"

// TestSecureSystem runs orders end to end against the embedded broker with
// TLS and SASL/SCRAM and the embedded event store with TLS and users:
// through the Go client (statuses on its reply topic) and through kcat
// with SASL_SSL; the official EventStoreDB client reads a task stream with
// tls=true and credentials. It checks the refusals (plaintext, wrong
// password, wrong CA, no credentials, non-admin rights) and that no
// password appears in any log line.
func TestSecureSystem(t *testing.T) {
	logs := &lockedBuffer{}
	s, files := secureSystem(t, logs)
	kafkaPass, err := files.KafkaPassword()
	require.NoError(t, err)
	esPass, err := files.EventStorePassword()
	require.NoError(t, err)
	u, err := url.Parse(s.app.EventStoreURL)
	require.NoError(t, err)
	esAddr := u.Host

	t.Run("go client over TLS and SCRAM", func(t *testing.T) {
		opts, err := s.app.KafkaSecurity.Opts()
		require.NoError(t, err)
		c, err := client.New(ctx(t, 10*time.Second), client.Config{Brokers: s.app.KafkaBrokers, KafkaOptions: opts})
		require.NoError(t, err)
		defer c.Close()
		out, err := c.Run(ctx(t, 60*time.Second), "sec-1", map[string]any{"items": []string{"book"}})
		require.NoError(t, err)
		assert.Equal(t, protocol.StatusProcessed, out.Final.Status)
		assert.Equal(t, "received", out.Statuses[0].Status, "statuses came on the reply topic")
	})

	t.Run("agent heartbeats read over TLS and SCRAM", func(t *testing.T) {
		opts, err := s.app.KafkaSecurity.Opts()
		require.NoError(t, err)
		producer, err := kafka.NewClient(s.app.KafkaBrokers, opts...)
		require.NoError(t, err)
		defer producer.Close()
		now := time.Now()
		beat, err := json.Marshal(protocol.AgentHeartbeat{Agent: "payment", Instance: "sec-pay-1", Health: protocol.HealthHealthy, Capacity: 2,
			StartedAt: now, At: now, ExpiresAt: now.Add(time.Hour)})
		require.NoError(t, err)
		require.NoError(t, producer.ProduceSync(ctx(t, 10*time.Second), &kgo.Record{Topic: protocol.AgentsTopic, Key: []byte("sec-pay-1"), Value: beat}).FirstErr())
		// The demo payment agent announces itself too: look for this one.
		require.Eventually(t, func() bool {
			for _, h := range s.app.AgentDirectory.Instances("payment", time.Now()) {
				if h.Instance == "sec-pay-1" {
					return true
				}
			}
			return false
		}, 30*time.Second, 20*time.Millisecond, "the engine's agent directory reads saga.agents with the secure mode's credentials")
	})

	t.Run("kcat with SASL_SSL", func(t *testing.T) {
		requireTools(t, "kcat")
		conf := filepath.Join(t.TempDir(), "kcat.conf")
		require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("security.protocol=SASL_SSL\nsasl.mechanisms=SCRAM-SHA-256\n"+
			"sasl.username=%s\nsasl.password=%s\nssl.ca.location=%s\n", files.KafkaUser, kafkaPass, files.CA)), 0o600))
		cmd := exec.Command("kcat", "-F", conf, "-P", "-b", strings.Join(s.app.KafkaBrokers, ","), "-t", protocol.OrdersTopic, "-K:")
		cmd.Stdin = strings.NewReader(`kcat-1:{"orderId":"kcat-1","items":[{"sku":"pen","qty":3}]}` + "\n")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		task := s.awaitTerminal([]string{"kcat-1"}, 60*time.Second)["kcat-1"]
		assert.Equal(t, domain.StateProcessed, task.State, task.Reason)

		// kcat without TLS and SASL gets nothing.
		plain := exec.Command("kcat", "-L", "-b", strings.Join(s.app.KafkaBrokers, ","), "-m", "3")
		out, err = plain.CombinedOutput()
		assert.Error(t, err, "plaintext kcat listed metadata: %s", out)
	})

	t.Run("official eventstoredb client with tls and credentials", func(t *testing.T) {
		events, err := esRead(t, s.app.EventStoreURL, domain.TaskStream("sec-1"))
		require.NoError(t, err)
		assert.Equal(t, domain.TaskSubmittedType, events[0], "read the task stream")
		assert.Contains(t, events, domain.TaskProcessedType)
	})

	t.Run("kafka refusals", func(t *testing.T) {
		try := func(sec kafka.Security) error {
			opts, err := sec.Opts()
			require.NoError(t, err)
			c, err := client.New(ctx(t, 10*time.Second), client.Config{Brokers: s.app.KafkaBrokers, KafkaOptions: opts, ConnectTimeout: 3 * time.Second})
			if err == nil {
				c.Close()
			}
			return sec.Explain(err)
		}
		err := try(kafka.Security{})
		require.Error(t, err, "plaintext client")
		assert.Contains(t, err.Error(), "is TLS missing?")

		wrong := s.app.KafkaSecurity
		wrong.SASLPasswordFile, wrong.SASLPassword = "", "wrong-password"
		err = try(wrong)
		require.ErrorIs(t, err, kafka.ErrAuthenticationFailed, "wrong SASL password")

		other, err := secure.Prepare(filepath.Join(t.TempDir(), "other"))
		require.NoError(t, err)
		wrongCA := s.app.KafkaSecurity
		wrongCA.CAFile = other.CA
		err = try(wrongCA)
		require.Error(t, err, "wrong CA")
		assert.Contains(t, err.Error(), "certificate signed by unknown authority")
	})

	t.Run("event store refusals", func(t *testing.T) {
		query := "?tls=true&tlsCAFile=" + files.CA
		stream := domain.TaskStream("sec-1")
		_, err := esRead(t, "esdb://"+esAddr+query, stream)
		assertESCode(t, err, esdb.ErrorCodeUnauthenticated, "no credentials")
		_, err = esRead(t, "esdb://admin:wrong@"+esAddr+query, stream)
		assertESCode(t, err, esdb.ErrorCodeUnauthenticated, "wrong password")

		reader := "esdb://reader:" + readerPassword + "@" + esAddr + query
		_, err = esRead(t, reader, stream)
		require.NoError(t, err, "a user reads a task stream")
		_, err = esRead(t, reader, "$$"+stream)
		assertESCode(t, err, esdb.ErrorCodeAccessDenied, "non-admin reading a $-stream")
		_, err = esRead(t, reader, "$all")
		assertESCode(t, err, esdb.ErrorCodeAccessDenied, "non-admin reading $all")
		err = esDo(t, reader, func(c *esdb.Client) error {
			_, err := c.DeleteStream(ctx(t, 5*time.Second), stream, esdb.DeleteStreamOptions{})
			return err
		})
		assertESCode(t, err, esdb.ErrorCodeAccessDenied, "non-admin deleting a stream")
		err = esDo(t, reader, func(c *esdb.Client) error {
			_, err := c.TombstoneStream(ctx(t, 5*time.Second), stream, esdb.TombstoneStreamOptions{})
			return err
		})
		assertESCode(t, err, esdb.ErrorCodeAccessDenied, "non-admin tombstoning a stream")

		other, err := secure.Prepare(filepath.Join(t.TempDir(), "other"))
		require.NoError(t, err)
		_, err = esRead(t, "esdb://admin:"+esPass+"@"+esAddr+"?tls=true&maxDiscoverAttempts=1&tlsCAFile="+other.CA, stream)
		require.Error(t, err, "a client that trusts another CA")

		store, err := eventstore.Dial("esdb://admin:"+esPass+"@"+esAddr+"?tls=false&maxDiscoverAttempts=1", testLogger())
		require.NoError(t, err)
		defer store.Close()
		_, err = store.ReadStream(ctx(t, 3*time.Second), stream)
		require.Error(t, err, "a plaintext client")
	})

	resp, err := http.Get("http://" + s.app.HTTPAddr + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NotEmpty(t, metrics)

	// Every log line of the run, debug included, and none holds a secret.
	s.stop()
	all := logs.String() + string(metrics)
	require.NotEmpty(t, all)
	for name, secret := range map[string]string{"kafka": kafkaPass, "event store": esPass, "reader": readerPassword} {
		assert.NotContains(t, all, secret, "the %s password is in the logs", name)
	}
}

// esDo runs op with the official client on a connection string.
func esDo(t *testing.T, conn string, op func(*esdb.Client) error) error {
	t.Helper()
	conf, err := esdb.ParseConnectionString(conn)
	require.NoError(t, err)
	c, err := esdb.NewClient(conf)
	require.NoError(t, err)
	defer c.Close()
	return op(c)
}

// esRead reads a stream (or $all) with the official client and returns its
// event types.
func esRead(t *testing.T, conn, stream string) ([]string, error) {
	t.Helper()
	var types []string
	err := esDo(t, conn, func(c *esdb.Client) error {
		c5 := ctx(t, 5*time.Second)
		var rs *esdb.ReadStream
		var err error
		if stream == "$all" {
			rs, err = c.ReadAll(c5, esdb.ReadAllOptions{}, 10)
		} else {
			rs, err = c.ReadStream(c5, stream, esdb.ReadStreamOptions{}, 100)
		}
		if err != nil {
			return err
		}
		defer rs.Close()
		for {
			ev, err := rs.Recv()
			if err != nil {
				if isEnd(err) {
					return nil
				}
				return err
			}
			types = append(types, ev.Event.EventType)
		}
	})
	return types, err
}

func isEnd(err error) bool { return errors.Is(err, io.EOF) }

func assertESCode(t *testing.T, err error, code esdb.ErrorCode, what string) {
	t.Helper()
	require.Error(t, err, what)
	var esErr *esdb.Error
	require.True(t, errors.As(err, &esErr), "%s: %v", what, err)
	assert.Equal(t, code, esErr.Code(), "%s: %v", what, err)
}

// lockedBuffer collects log output from several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
