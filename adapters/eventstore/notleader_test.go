package eventstore_test

import (
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/domain"
)

// notLeaderAnswer is KurrentDB's answer from a follower to a request that
// needs the leader (RpcExceptions.LeaderInfo): NotFound, and the leader's
// host and port as trailers.
func notLeaderAnswer(stream grpc.ServerStream, leader string) error {
	host, port, _ := net.SplitHostPort(leader)
	_ = grpc.SetTrailer(stream.Context(), metadata.Pairs("exception", "not-leader",
		"leader-endpoint-host", host, "leader-endpoint-port", port))
	return status.Error(codes.NotFound, "Leader info available")
}

// leaderStreams accepts every append, as a leader would, and counts them.
func leaderStreams(appended *atomic.Int64) *scriptedStreams {
	return &scriptedStreams{
		batchAppend: func(srv streams.Streams_BatchAppendServer) error {
			for {
				req, err := srv.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				if !req.GetIsFinal() {
					continue
				}
				n := uint64(appended.Add(1))
				if err := srv.Send(&streams.BatchAppendResp{CorrelationId: req.GetCorrelationId(),
					Result: &streams.BatchAppendResp_Success_{Success: &streams.BatchAppendResp_Success{
						CurrentRevisionOption: &streams.BatchAppendResp_Success_CurrentRevision{CurrentRevision: 0},
						PositionOption: &streams.BatchAppendResp_Success_Position{Position: &shared.AllStreamPosition{
							CommitPosition: 100 * n, PreparePosition: 100 * n}}}}}); err != nil {
					return err
				}
			}
		},
		appendStream: func(srv streams.Streams_AppendServer) error {
			for {
				if _, err := srv.Recv(); err == io.EOF {
					break
				} else if err != nil {
					return err
				}
			}
			n := uint64(appended.Add(1))
			return srv.SendAndClose(&streams.AppendResp{Result: &streams.AppendResp_Success_{Success: &streams.AppendResp_Success{
				CurrentRevisionOption: &streams.AppendResp_Success_CurrentRevision{CurrentRevision: 0},
				PositionOption: &streams.AppendResp_Success_Position{Position: &streams.AppendResp_Position{
					CommitPosition: 100 * n, PreparePosition: 100 * n}}}}})
		},
	}
}

// TestNotLeaderFollowsTheLeader: a follower answers appends NotLeader with
// the leader's endpoint, as KurrentDB does; the adapter appends to that
// leader instead of failing, on either path (the pipelined one moves its
// own connection; the unary one is the official client's, which
// reconnects).
func TestNotLeaderFollowsTheLeader(t *testing.T) {
	for path, suffix := range paths {
		t.Run(string(path), func(t *testing.T) {
			var appended, refused atomic.Int64
			leader := startScripted(t, leaderStreams(&appended))
			follower := startScripted(t, &scriptedStreams{
				batchAppend: func(srv streams.Streams_BatchAppendServer) error {
					if _, err := srv.Recv(); err != nil {
						return err
					}
					refused.Add(1)
					return notLeaderAnswer(srv, leader)
				},
				appendStream: func(srv streams.Streams_AppendServer) error {
					// KurrentDB reads the whole append, then finds it is
					// not the leader.
					for {
						if _, err := srv.Recv(); err == io.EOF {
							break
						} else if err != nil {
							return err
						}
					}
					refused.Add(1)
					return notLeaderAnswer(srv, leader)
				},
			})
			s := dialStore(t, fmt.Sprintf("esdb://%s?tls=false%s", follower, suffix))
			for i := range 3 {
				_, err := s.Append(ctx(t), fmt.Sprintf("task-%d", i), domain.ExpectAny(), newEvent("E", `{}`))
				require.NoError(t, err, "append %d", i)
			}
			assert.Equal(t, int64(3), appended.Load(), "every append reached the leader")
			assert.Equal(t, int64(1), refused.Load(), "the follower was asked once, then the leader")
		})
	}
}
