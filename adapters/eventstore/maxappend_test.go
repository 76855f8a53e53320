package eventstore_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
)

// TestAppendOverTheMaxAppendSizeIsRefusedAlike: KurrentDB's 1 MiB limit
// binds the whole append, however the adapter sends it (in chunks of 512
// KiB on the pipelined path, in one request on the unary one, or an event
// too large for a chunk), and the adapter reports it the same way every
// time: ErrAppendTooLarge with domain.ErrAppendRefused (marks, as
// ErrStreamDeleted: errors.Is of cockroachdb/errors finds them).
func TestAppendOverTheMaxAppendSizeIsRefusedAlike(t *testing.T) {
	if os.Getenv("SAGA_TEST_EVENTSTORE") != "" {
		t.Skip("needs the embedded server's default limits")
	}
	srv := startEmbedded(t, esdbserver.Config{})
	quarter := func(typ string) domain.NewEvent {
		return newEvent(typ, `"`+strings.Repeat("q", 400<<10)+`"`)
	}
	for path, suffix := range paths {
		t.Run(string(path), func(t *testing.T) {
			s := dialStore(t, fmt.Sprintf("esdb://%s?tls=false%s", srv.Addr(), suffix))
			name := func(n string) string { return "task-" + n + "-" + string(path) }

			_, err := s.Append(ctx(t), name("fits"), domain.ExpectNoStream(), quarter("A"), quarter("B"))
			require.NoError(t, err, "800 KiB fits")

			_, err = s.Append(ctx(t), name("chunks"), domain.ExpectNoStream(), quarter("A"), quarter("B"), quarter("C"))
			require.True(t, errors.Is(err, eventstore.ErrAppendTooLarge), "1.2 MiB in 400 KiB events: %v", err)
			require.ErrorIs(t, err, domain.ErrAppendRefused)
			assert.Contains(t, err.Error(), "maximum append size of 1048576 bytes")

			one := newEvent("A", `"`+strings.Repeat("o", 1100<<10)+`"`)
			_, err = s.Append(ctx(t), name("one"), domain.ExpectNoStream(), one)
			require.True(t, errors.Is(err, eventstore.ErrAppendTooLarge), "one event of 1.1 MiB: %v", err)
			require.ErrorIs(t, err, domain.ErrAppendRefused)
			assert.Equal(t, path, s.AppendPath())
		})
	}
}
