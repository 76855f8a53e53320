package eventstore_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/adapters/secure"
	"github.com/sagaengine/saga/domain"
)

// paths are the connection-string suffixes of both append paths.
var paths = map[eventstore.AppendPath]string{
	eventstore.AppendPipelined: "",
	eventstore.AppendUnary:     "&appendPath=unary",
}

func startEmbedded(t *testing.T, cfg esdbserver.Config) *esdbserver.Server {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	srv, err := esdbserver.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func dialStore(t *testing.T, url string) *eventstore.Store {
	t.Helper()
	s, err := eventstore.Dial(url, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestPipelinedAppendsFromManyGoroutines: many goroutines' appends in flight
// at once on the one call each get their own answer.
func TestPipelinedAppendsFromManyGoroutines(t *testing.T) {
	srv := startEmbedded(t, esdbserver.Config{})
	s := dialStore(t, fmt.Sprintf("esdb://%s?tls=false", srv.Addr()))
	const writers, each = 64, 10
	prefix := "pipe-" + uuid.NewString()[:8] + "-"
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			expected := domain.ExpectNoStream()
			for i := range each {
				rev, err := s.Append(ctx(t), fmt.Sprintf("%s%d", prefix, w), expected, newEvent("E", fmt.Sprintf(`{"i":%d}`, i)))
				if err != nil {
					errs <- err
					return
				}
				if rev != uint64(i) {
					errs <- fmt.Errorf("writer %d append %d reached revision %d", w, i, rev)
					return
				}
				expected = domain.ExpectRevision(rev)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, eventstore.AppendPipelined, s.AppendPath())
	for w := range writers {
		got, err := s.ReadStream(ctx(t), fmt.Sprintf("%s%d", prefix, w))
		require.NoError(t, err)
		assert.Len(t, got, each)
	}
}

// TestPipelinedAppendsSurviveAServerRestart: appends in flight when the
// server goes away fail with a retryable error and are retried, with the
// same event ids, on a new call: every writer finishes, and every stream
// holds each of its events exactly once.
func TestPipelinedAppendsSurviveAServerRestart(t *testing.T) {
	for path, suffix := range paths {
		t.Run(string(path), func(t *testing.T) {
			dir := t.TempDir()
			srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: dir})
			require.NoError(t, err)
			addr := srv.Addr()
			s := dialStore(t, fmt.Sprintf("esdb://%s?tls=false%s", addr, suffix))
			const writers, each = 16, 40
			prefix := "restart-" + uuid.NewString()[:8] + "-"
			var done atomic.Int64
			halfway := make(chan struct{})
			var once sync.Once
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					expected := domain.ExpectNoStream()
					for i := range each {
						rev, err := s.Append(ctx(t), fmt.Sprintf("%s%d", prefix, w), expected, newEvent("E", fmt.Sprintf(`{"i":%d}`, i)))
						if err != nil {
							errs <- fmt.Errorf("writer %d append %d: %w", w, i, err)
							return
						}
						expected = domain.ExpectRevision(rev)
						if done.Add(1) == writers*each/2 {
							once.Do(func() { close(halfway) })
						}
					}
				}()
			}
			<-halfway
			require.NoError(t, srv.Close())
			srv, err = esdbserver.Start(esdbserver.Config{Listen: addr, DataDir: dir})
			require.NoError(t, err)
			t.Cleanup(func() { _ = srv.Close() })
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			for w := range writers {
				got, err := s.ReadStream(ctx(t), fmt.Sprintf("%s%d", prefix, w))
				require.NoError(t, err)
				require.Len(t, got, each, "writer %d: every event once", w)
				for i, e := range got {
					assert.JSONEq(t, fmt.Sprintf(`{"i":%d}`, i), string(e.Data))
				}
			}
			assert.Equal(t, path, s.AppendPath())
		})
	}
}

// TestPipelinedLargeAppendGoesInChunks: an append larger than one request
// is sent in chunks and committed whole (900 KiB: under the 1 MiB limit).
func TestPipelinedLargeAppendGoesInChunks(t *testing.T) {
	srv := startEmbedded(t, esdbserver.Config{})
	s := dialStore(t, fmt.Sprintf("esdb://%s?tls=false", srv.Addr()))
	events := make([]domain.NewEvent, 30)
	for i := range events {
		events[i] = newEvent("E", fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", 30<<10)))
	}
	rev, err := s.Append(ctx(t), "task-large", domain.ExpectNoStream(), events...)
	require.NoError(t, err)
	assert.Equal(t, uint64(len(events)-1), rev)
	got, err := s.ReadStream(ctx(t), "task-large")
	require.NoError(t, err)
	assert.Len(t, got, len(events))
	assert.Equal(t, eventstore.AppendPipelined, s.AppendPath())
}

// TestAppendPathParameter: the connection string chooses the path, and a
// bad value is refused at Dial.
func TestAppendPathParameter(t *testing.T) {
	s := dialStore(t, "esdb://127.0.0.1:1?tls=false&appendPath=unary")
	assert.Equal(t, eventstore.AppendUnary, s.AppendPath())
	s = dialStore(t, "esdb://127.0.0.1:1?tls=false")
	assert.Equal(t, eventstore.AppendPipelined, s.AppendPath())
	s = dialStore(t, "esdb://127.0.0.1:1,127.0.0.2:1?tls=false")
	assert.Equal(t, eventstore.AppendUnary, s.AppendPath(), "several nodes: the official client finds the leader")
	_, err := eventstore.Dial("esdb://admin:secret@127.0.0.1:1?tls=false&appendPath=fast", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "appendPath")
	assert.NotContains(t, err.Error(), "secret")
}

// TestSecureAppendsOnBothPaths: over TLS with credentials, both paths
// append as the user, and refuse alike what the user may not do or a wrong
// password.
func TestSecureAppendsOnBothPaths(t *testing.T) {
	files, err := secure.Prepare(filepath.Join(t.TempDir(), "secure"))
	require.NoError(t, err)
	tlsCfg, err := files.ServerTLS()
	require.NoError(t, err)
	hash, err := esdbserver.HashPassword("pw")
	require.NoError(t, err)
	srv := startEmbedded(t, esdbserver.Config{TLS: tlsCfg, Users: []esdbserver.User{{Name: "writer", Hash: hash}},
		Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))})
	for path, suffix := range paths {
		t.Run(string(path), func(t *testing.T) {
			url := func(password string) string {
				return fmt.Sprintf("esdb://writer:%s@%s?tls=true&tlsCAFile=%s%s", password, srv.Addr(), files.CA, suffix)
			}
			s := dialStore(t, url("pw"))
			_, err := s.Append(ctx(t), "task-"+uuid.NewString(), domain.ExpectNoStream(), newEvent("E", `{}`))
			require.NoError(t, err)
			assert.Equal(t, path, s.AppendPath())

			_, err = s.Append(ctx(t), "$system-"+uuid.NewString(), domain.ExpectAny(), newEvent("E", `{}`))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "ErrorCodeAccessDenied")
			assert.NotErrorIs(t, err, domain.ErrAppendRefused)

			bad := dialStore(t, url("wrong"))
			_, err = bad.Append(ctx(t), "task-"+uuid.NewString(), domain.ExpectNoStream(), newEvent("E", `{}`))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "ErrorCodeUnauthenticated")
			assert.NotContains(t, err.Error(), "wrong@", "the password is not shown")
		})
	}
}
