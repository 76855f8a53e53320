package esdbserver_test

import (
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbserver"
)

// TestWrongExpectedVersionTrailersAreEventStoreDBs: a Delete or Tombstone
// whose expected revision does not hold ends as EventStoreDB's does
// (RpcExceptions.WrongExpectedVersion): FailedPrecondition with the
// exception, the stream's name, and both versions as numbers (-1 for no
// stream), which the official Node client needs to settle its promise.
func TestWrongExpectedVersionTrailersAreEventStoreDBs(t *testing.T) {
	_, client, raw := startWith(t, esdbserver.Config{})
	s := stream("wev")
	_, err := client.AppendToStream(ctx(t), s, esdb.AppendToStreamOptions{}, events(2, "E")...)
	require.NoError(t, err)
	missing := stream("missing")
	noStream := &streams.DeleteReq_Options_NoStream{NoStream: &shared.Empty{}}

	for _, tc := range []struct {
		name, stream, expected, actual, op string
		call                               func(opts ...grpc.CallOption) error
	}{
		{"delete expecting no stream", s, "-1", "1", "Delete", func(opts ...grpc.CallOption) error {
			_, err := raw.Delete(ctx(t), &streams.DeleteReq{Options: &streams.DeleteReq_Options{
				StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(s)}, ExpectedStreamRevision: noStream}}, opts...)
			return err
		}},
		{"delete of a missing stream", missing, "0", "-1", "Delete", func(opts ...grpc.CallOption) error {
			_, err := raw.Delete(ctx(t), &streams.DeleteReq{Options: &streams.DeleteReq_Options{
				StreamIdentifier:       &shared.StreamIdentifier{StreamName: []byte(missing)},
				ExpectedStreamRevision: &streams.DeleteReq_Options_Revision{Revision: 0}}}, opts...)
			return err
		}},
		{"tombstone expecting a revision", s, "7", "1", "Tombstone", func(opts ...grpc.CallOption) error {
			_, err := raw.Tombstone(ctx(t), &streams.TombstoneReq{Options: &streams.TombstoneReq_Options{
				StreamIdentifier:       &shared.StreamIdentifier{StreamName: []byte(s)},
				ExpectedStreamRevision: &streams.TombstoneReq_Options_Revision{Revision: 7}}}, opts...)
			return err
		}},
		{"tombstone expecting an existing stream", missing, "-4", "-1", "Tombstone", func(opts ...grpc.CallOption) error {
			_, err := raw.Tombstone(ctx(t), &streams.TombstoneReq{Options: &streams.TombstoneReq_Options{
				StreamIdentifier:       &shared.StreamIdentifier{StreamName: []byte(missing)},
				ExpectedStreamRevision: &streams.TombstoneReq_Options_StreamExists{StreamExists: &shared.Empty{}}}}, opts...)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var trailer metadata.MD
			err := tc.call(grpc.Trailer(&trailer))
			require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
			assert.Equal(t, []string{"wrong-expected-version"}, trailer.Get("exception"))
			assert.Equal(t, []string{tc.stream}, trailer.Get("stream-name"))
			assert.Equal(t, []string{tc.expected}, trailer.Get("expected-version"))
			assert.Equal(t, []string{tc.actual}, trailer.Get("actual-version"))
			assert.Contains(t, status.Convert(err).Message(), tc.op+" failed due to WrongExpectedVersion. Stream: "+tc.stream)
		})
	}
}
