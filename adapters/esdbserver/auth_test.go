package esdbserver_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/secure"
)

// TestSecureDefaultAdmin: a secure server given no users has admin with
// the well-known password, says so loudly, and refuses anyone else.
func TestSecureDefaultAdmin(t *testing.T) {
	files, err := secure.Prepare(filepath.Join(t.TempDir(), "secure"))
	require.NoError(t, err)
	tlsCfg, err := files.ServerTLS()
	require.NoError(t, err)
	var logs bytes.Buffer
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), TLS: tlsCfg,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	assert.Contains(t, logs.String(), "DEFAULT ACCOUNT admin/changeit")

	appendAs := func(userinfo string) error {
		conf, err := esdb.ParseConnectionString("esdb://" + userinfo + srv.Addr() + "?tls=true&tlsCAFile=" + files.CA)
		require.NoError(t, err)
		c, err := esdb.NewClient(conf)
		require.NoError(t, err)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = c.AppendToStream(ctx, "s-1", esdb.AppendToStreamOptions{}, esdb.EventData{EventType: "E", ContentType: esdb.ContentTypeJson, Data: []byte("{}")})
		return err
	}
	require.NoError(t, appendAs("admin:changeit@"))
	for _, who := range []string{"", "admin:wrong@", "nobody:changeit@"} {
		err := appendAs(who)
		var esErr *esdb.Error
		require.True(t, errors.As(err, &esErr), "%q: %v", who, err)
		assert.Equal(t, esdb.ErrorCodeUnauthenticated, esErr.Code(), "%q: %v (%+v)", who, err, esErr.Err())
	}
}

func TestLoadUsers(t *testing.T) {
	hash, err := esdbserver.HashPassword("pw")
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "users")
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	users, err := esdbserver.LoadUsers(write("# comment\n\nadmin:" + hash + ":$admins\nreader:" + hash + "\n"))
	require.NoError(t, err)
	require.Len(t, users, 2)
	assert.True(t, users[0].Admin())
	assert.False(t, users[1].Admin())
	for name, content := range map[string]string{
		"empty":      "# nobody\n",
		"plain text": "admin:changeit:$admins\n",
		"twice":      "a:" + hash + "\na:" + hash + "\n",
		"no name":    ":" + hash + "\n",
	} {
		_, err := esdbserver.LoadUsers(write(content))
		require.ErrorIs(t, err, esdbserver.ErrBadUsersFile, name)
		assert.NotContains(t, err.Error(), "changeit", "%s: the error shows no password", name)
	}
}

// TestRefusedAppendIsReportedAsRefused: a user who may not write a system
// stream hears AccessDenied even when the append is still being sent as
// the server refuses it. The events here outgrow gRPC's flow-control
// window, so without reading them first the server's answer would reach a
// client blocked in a send, which then reports a bare EOF.
func TestRefusedAppendIsReportedAsRefused(t *testing.T) {
	files, err := secure.Prepare(filepath.Join(t.TempDir(), "secure"))
	require.NoError(t, err)
	tlsCfg, err := files.ServerTLS()
	require.NoError(t, err)
	hash, err := esdbserver.HashPassword("pw")
	require.NoError(t, err)
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), TLS: tlsCfg,
		Users: []esdbserver.User{{Name: "writer", Hash: hash}}, Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	conf, err := esdb.ParseConnectionString("esdb://writer:pw@" + srv.Addr() + "?tls=true&tlsCAFile=" + files.CA)
	require.NoError(t, err)
	c, err := esdb.NewClient(conf)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	events := make([]esdb.EventData, 8)
	for i := range events {
		events[i] = esdb.EventData{EventType: "E", ContentType: esdb.ContentTypeBinary, Data: bytes.Repeat([]byte{'x'}, 100<<10)}
	}
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.AppendToStream(ctx, "$system-refused", esdb.AppendToStreamOptions{}, events...)
		cancel()
		var esErr *esdb.Error
		require.True(t, errors.As(err, &esErr), "%v", err)
		assert.Equal(t, esdb.ErrorCodeAccessDenied, esErr.Code(), "%v", err)
	}
}
