package eventstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/esdbwire"
	"github.com/sagaengine/saga/domain"
)

// goldenFrame reads a frame protoc encoded from KurrentDB's .proto files of
// version (adapters/esdbwire/testdata/kurrentdb/README.md).
func goldenFrame(t *testing.T, version, name string) *esdbwire.Encoded {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "esdbwire", "testdata", "kurrentdb", "golden", version, name+".bin"))
	require.NoError(t, err)
	return &esdbwire.Encoded{B: b}
}

// TestSubscribeAllOverKurrentDBsFrames replays, as a subscription to $all,
// the answers KurrentDB of each version sends (as its protos encode them):
// ids in both forms, a legacy transaction's event, a checkpoint, a server's
// own event, a resolved link, a link whose target is gone, fell-behind and
// caught-up as each version has them, and for a newer server fields and
// kinds of answer this client does not know. Both paths deliver exactly the
// three events, once each, and the caught-up signal; after a drop they
// resume after the last link, the last record in $all.
func TestSubscribeAllOverKurrentDBsFrames(t *testing.T) {
	for _, version := range []string{"23.10", "24.10", "25.1", "future"} {
		checkpoint, fellBehind, caughtUp, first := "read_checkpoint_timestamp", "read_fell_behind_all", "read_caught_up_all", "read_event_structured"
		var extra []string
		switch version {
		case "23.10":
			checkpoint, fellBehind, caughtUp = "read_checkpoint", "read_fell_behind_empty", "read_caught_up_empty"
		case "future":
			first, extra = "read_event_future_fields", []string{"read_future_kind"}
		}
		script := append(append([]string{"read_confirmation"}, extra...), first, "read_event_string_uuid",
			"read_event_legacy_transaction", checkpoint, "read_event_system", "read_event_resolved_link", "read_event_link_to_deleted", fellBehind, caughtUp)
		for path, suffix := range paths {
			t.Run(version+"/"+string(path), func(t *testing.T) {
				fake := &scriptedStreams{read: func(n int, _ *streams.ReadReq, srv streams.Streams_ReadServer) error {
					frames := script
					if n > 0 {
						frames = []string{"read_confirmation", caughtUp}
					}
					for _, name := range frames {
						if err := srv.SendMsg(goldenFrame(t, version, name)); err != nil {
							return err
						}
					}
					if n == 0 {
						return errDropped
					}
					<-srv.Context().Done()
					return nil
				}}
				addr := startScripted(t, fake)
				s := dialStore(t, fmt.Sprintf("esdb://%s?tls=false%s", addr, suffix))
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				var got []string
				caughtUps := 0
				err := s.SubscribeAll(ctx, domain.FromStart(), "", func(it domain.SubscriptionItem) error {
					if it.CaughtUp {
						if caughtUps++; caughtUps == 2 {
							return errEnough
						}
						return nil
					}
					got = append(got, fmt.Sprintf("%s %s %s@%d", it.Event.ID, it.Event.Type, it.Event.Stream, it.Event.Position))
					return nil
				})
				require.ErrorIs(t, err, errEnough)
				assert.Equal(t, []string{
					"0b0e3a4c-5d6e-4f70-8192-a3b4c5d6e7f8 StepSucceeded task-o-1@4096",
					"f1e2d3c4-b5a6-4978-8a6b-5c4d3e2f1a0b InvoiceIssued billing-42@5120",
					"11111111-2222-4333-8444-555555555555 StepFailed task-legacy@7000",
				}, got)
				reqs := fake.readRequests()
				require.Len(t, reqs, 2, "one subscription dropped, one resumed")
				pos := reqs[1].GetOptions().GetAll().GetPosition()
				assert.Equal(t, uint64(9900), pos.GetCommitPosition(), "resumed after the last link")
				assert.Equal(t, uint64(9900), pos.GetPreparePosition())
			})
		}
	}
}
