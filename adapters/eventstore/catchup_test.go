package eventstore_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/secure"
	"github.com/sagaengine/saga/domain"
)

// TestSecureSubscriptionsOnBothPaths: over TLS with an administrator's
// credentials, SubscribeAll reads $all on both paths (the pipelined one
// reads it on the adapter's own connection, which must send them too).
func TestSecureSubscriptionsOnBothPaths(t *testing.T) {
	files, err := secure.Prepare(filepath.Join(t.TempDir(), "secure"))
	require.NoError(t, err)
	tlsCfg, err := files.ServerTLS()
	require.NoError(t, err)
	hash, err := esdbserver.HashPassword("pw")
	require.NoError(t, err)
	srv := startEmbedded(t, esdbserver.Config{TLS: tlsCfg,
		Users:  []esdbserver.User{{Name: "boss", Hash: hash, Groups: []string{esdbserver.AdminsGroup}}},
		Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))})
	for path, suffix := range paths {
		t.Run(string(path), func(t *testing.T) {
			s := dialStore(t, fmt.Sprintf("esdb://boss:pw@%s?tls=true&tlsCAFile=%s%s", srv.Addr(), files.CA, suffix))
			prefix := "task-" + uuid.NewString()[:8]
			_, err := s.Append(ctx(t), prefix+"-1", domain.ExpectNoStream(), newEvent("E", `{}`))
			require.NoError(t, err)
			c, cancel := context.WithCancel(ctx(t))
			defer cancel()
			var got []string
			err = s.SubscribeAll(c, domain.FromStart(), prefix, func(it domain.SubscriptionItem) error {
				if it.CaughtUp {
					cancel()
					return nil
				}
				got = append(got, it.Event.Stream)
				return nil
			})
			require.True(t, errors.Is(err, context.Canceled), "%v", err)
			require.Equal(t, []string{prefix + "-1"}, got)
		})
	}
}
