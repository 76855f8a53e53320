package esdbserver_test

import (
	"strings"
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbserver"
)

// TestMaxAppendSizeIsKurrentDBsAcrossChunks: by default the server takes
// what KurrentDB takes, 1 MiB per append, counted over the whole append
// however many chunks carry it, and refuses more as KurrentDB does: a
// BatchAppend answer with MaximumAppendSizeExceeded, an Append ending with
// its message and trailers.
func TestMaxAppendSizeIsKurrentDBsAcrossChunks(t *testing.T) {
	_, client, raw := startWith(t, esdbserver.Config{})
	const limit = 1 << 20
	chunk := strings.Repeat("x", 400<<10)
	chunked := func(name string, n int) []*streams.BatchAppendReq {
		id := uuid.New()
		var reqs []*streams.BatchAppendReq
		for i := range n {
			r := &streams.BatchAppendReq{CorrelationId: uuidOf(id), ProposedMessages: []*streams.BatchAppendReq_ProposedMessage{batchEvent(uuid.New(), "E", `"`+chunk+`"`)}}
			if i == 0 {
				r.Options = batchReq(id, name, nil).Options
			}
			r.IsFinal = i == n-1
			reqs = append(reqs, r)
		}
		return reqs
	}
	b := openBatch(t, raw)

	over := stream("over")
	reqs := chunked(over, 3)
	b.send(reqs[:2]...)
	resp := b.one(reqs[2])
	require.Equal(t, codes.InvalidArgument, errorCode(resp), "1.2 MiB in chunks of 400 KiB: %v", resp)
	assert.Equal(t, "MaximumAppendSizeExceeded", resp.GetError().GetMessage())
	require.Len(t, resp.GetError().GetDetails(), 1)
	var tooLarge shared.MaximumAppendSizeExceeded
	require.NoError(t, resp.GetError().GetDetails()[0].UnmarshalTo(&tooLarge))
	assert.Equal(t, uint32(limit), tooLarge.GetMaxAppendSize())
	_, err := readStream(t, client, over, esdb.ReadStreamOptions{}, 10)
	assert.Equal(t, esdb.ErrorCodeResourceNotFound, code(err), "nothing written")

	under := stream("under")
	reqs = chunked(under, 2)
	b.send(reqs[0])
	resp = b.one(reqs[1])
	require.NotNil(t, resp.GetSuccess(), "800 KiB in two chunks: %v", resp.GetError())

	// Append: KurrentDB's message and trailers (RpcExceptions.MaxAppendSizeExceeded).
	a, err := raw.Append(ctx(t))
	require.NoError(t, err)
	require.NoError(t, a.Send(options(stream("unary"))))
	for range 3 {
		require.NoError(t, a.Send(proposed(goodID(), "E", []byte(`"`+chunk+`"`))))
	}
	_, err = a.CloseAndRecv()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Equal(t, "Maximum Append Size of 1048576 Exceeded.", status.Convert(err).Message())
	trailer := a.Trailer()
	assert.Equal(t, []string{"maximum-append-size-exceeded"}, trailer.Get("exception"))
	assert.Equal(t, []string{"1048576"}, trailer.Get("maximum-append-size"))
}
