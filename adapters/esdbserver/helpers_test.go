package esdbserver_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
)

// externalEnv names a real EventStoreDB/KurrentDB to run the contract suite
// against instead of the embedded server, e.g. esdb://127.0.0.1:2113?tls=false.
const externalEnv = "SAGA_TEST_EVENTSTORE"

type target struct {
	t      *testing.T
	dir    string
	server *esdbserver.Server
	client *esdb.Client
}

// newTarget starts an embedded server on a random port (or uses the external
// one) and connects the official client to it.
func newTarget(t *testing.T) *target {
	t.Helper()
	tg := &target{t: t, dir: t.TempDir()}
	tg.start()
	t.Cleanup(tg.stop)
	return tg
}

// embeddedOnly skips tests that inspect or restart the embedded server.
func embeddedOnly(t *testing.T) {
	if os.Getenv(externalEnv) != "" {
		t.Skip("needs the embedded server")
	}
}

func (tg *target) start() {
	url := os.Getenv(externalEnv)
	if url == "" {
		srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: tg.dir, MaxEventSize: 1 << 20, SegmentSize: 1 << 20})
		require.NoError(tg.t, err)
		tg.server = srv
		url = fmt.Sprintf("esdb://%s?tls=false", srv.Addr())
	}
	tg.client = connect(tg.t, url)
}

func connect(t *testing.T, url string) *esdb.Client {
	conf, err := esdb.ParseConnectionString(url)
	require.NoError(t, err)
	conf.Logger = esdb.NoopLogging()
	client, err := esdb.NewClient(conf)
	require.NoError(t, err)
	return client
}

func (tg *target) stop() {
	if tg.client != nil {
		_ = tg.client.Close()
		tg.client = nil
	}
	if tg.server != nil {
		require.NoError(tg.t, tg.server.Close())
		tg.server = nil
	}
}

func (tg *target) restart() {
	tg.stop()
	tg.start()
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// stream returns a stream name unique to the test run.
func stream(prefix string) string { return prefix + "-" + uuid.NewString() }

func event(typ string, data string) esdb.EventData {
	return esdb.EventData{EventID: uuid.New(), EventType: typ, ContentType: esdb.ContentTypeJson, Data: []byte(data)}
}

func events(n int, typ string) []esdb.EventData {
	out := make([]esdb.EventData, n)
	for i := range out {
		out[i] = event(typ, fmt.Sprintf(`{"n":%d}`, i))
	}
	return out
}

func readStream(t *testing.T, c *esdb.Client, name string, opts esdb.ReadStreamOptions, count uint64) ([]*esdb.ResolvedEvent, error) {
	t.Helper()
	rs, err := c.ReadStream(ctx(t), name, opts, count)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []*esdb.ResolvedEvent
	for {
		e, err := rs.Recv()
		if err != nil {
			if err.Error() == "EOF" {
				return out, nil
			}
			return out, err
		}
		out = append(out, e)
	}
}

func revisions(evs []*esdb.ResolvedEvent) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Event.EventNumber
	}
	return out
}

// code is the client's error code for err, or -1.
func code(err error) esdb.ErrorCode {
	var e *esdb.Error
	if errors.As(err, &e) {
		return e.Code()
	}
	return -1
}
