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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func rawClient(t *testing.T, tg *target) streams.StreamsClient {
	conn, err := grpc.NewClient(tg.server.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return streams.NewStreamsClient(conn)
}

func options(name string) *streams.AppendReq {
	return &streams.AppendReq{Content: &streams.AppendReq_Options_{Options: &streams.AppendReq_Options{
		StreamIdentifier:       &shared.StreamIdentifier{StreamName: []byte(name)},
		ExpectedStreamRevision: &streams.AppendReq_Options_Any{Any: &shared.Empty{}},
	}}}
}

func proposed(id *shared.UUID, typ string, data []byte) *streams.AppendReq {
	meta := map[string]string{"content-type": "application/json"}
	if typ != "" {
		meta["type"] = typ
	}
	return &streams.AppendReq{Content: &streams.AppendReq_ProposedMessage_{ProposedMessage: &streams.AppendReq_ProposedMessage{
		Id: id, Metadata: meta, Data: data,
	}}}
}

func goodID() *shared.UUID {
	return &shared.UUID{Value: &shared.UUID_String_{String_: uuid.NewString()}}
}

func rawAppend(t *testing.T, c streams.StreamsClient, msgs ...*streams.AppendReq) error {
	a, err := c.Append(ctx(t))
	require.NoError(t, err)
	for _, m := range msgs {
		if err := a.Send(m); err != nil {
			break
		}
	}
	_, err = a.CloseAndRecv()
	return err
}

func TestMalformedRequestsAreRejectedClearly(t *testing.T) {
	embeddedOnly(t)
	tg := newTarget(t)
	c := rawClient(t, tg)
	s := stream("bad")
	cases := []struct {
		name string
		msgs []*streams.AppendReq
		want string
	}{
		{"no messages", nil, "no messages"},
		{"no options message", []*streams.AppendReq{proposed(goodID(), "E", nil)}, "must carry options"},
		{"empty stream name", []*streams.AppendReq{options(""), proposed(goodID(), "E", nil)}, "stream name is empty"},
		{"invalid uuid", []*streams.AppendReq{options(s), proposed(&shared.UUID{Value: &shared.UUID_String_{String_: "not-a-uuid"}}, "E", nil)}, "not a UUID"},
		{"missing uuid", []*streams.AppendReq{options(s), proposed(nil, "E", nil)}, "id is missing"},
		{"missing type", []*streams.AppendReq{options(s), proposed(goodID(), "", nil)}, "no \"type\""},
		{"options twice", []*streams.AppendReq{options(s), options(s)}, "not a proposed event"},
		{"oversized event", []*streams.AppendReq{options(s), proposed(goodID(), "E", make([]byte, 1<<20+1))}, "over the limit"},
		{"bad event after good ones", []*streams.AppendReq{options(s), proposed(goodID(), "E", []byte(`{}`)), proposed(goodID(), "E", []byte(`{}`)), proposed(goodID(), "", nil)}, "no \"type\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := rawAppend(t, c, tc.msgs...)
			require.Error(t, err)
			assert.Equal(t, codes.InvalidArgument, status.Code(err), err.Error())
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := readStream(t, tg.client, s, esdb.ReadStreamOptions{}, 10)
	assert.Equal(t, esdb.ErrorCodeResourceNotFound, code(err), "no rejected append wrote anything")

	for name, req := range map[string]*streams.ReadReq{
		"read without options":    {},
		"read without count":      {Options: &streams.ReadReq_Options{StreamOption: &streams.ReadReq_Options_All{All: &streams.ReadReq_Options_AllOptions{}}}},
		"read without stream":     {Options: &streams.ReadReq_Options{CountOption: &streams.ReadReq_Options_Count{Count: 1}}},
		"read with a bad regex":   {Options: &streams.ReadReq_Options{StreamOption: &streams.ReadReq_Options_All{All: &streams.ReadReq_Options_AllOptions{}}, CountOption: &streams.ReadReq_Options_Count{Count: 1}, FilterOption: &streams.ReadReq_Options_Filter{Filter: &streams.ReadReq_Options_FilterOptions{Filter: &streams.ReadReq_Options_FilterOptions_EventType{EventType: &streams.ReadReq_Options_FilterOptions_Expression{Regex: "(["}}}}}},
		"read of an empty stream": {Options: &streams.ReadReq_Options{StreamOption: &streams.ReadReq_Options_Stream{Stream: &streams.ReadReq_Options_StreamOptions{}}, CountOption: &streams.ReadReq_Options_Count{Count: 1}}},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := c.Read(ctx(t), req)
			require.NoError(t, err)
			_, err = r.Recv()
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		})
	}
	_, err = c.Delete(ctx(t), &streams.DeleteReq{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = c.Tombstone(ctx(t), &streams.TombstoneReq{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}

func TestOversizedEventThroughOfficialClient(t *testing.T) {
	embeddedOnly(t)
	tg := newTarget(t)
	_, err := tg.client.AppendToStream(ctx(t), stream("big"), esdb.AppendToStreamOptions{},
		esdb.EventData{EventType: "Big", ContentType: esdb.ContentTypeBinary, Data: []byte(strings.Repeat("x", 1<<20+1))})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "over the limit")
	// The server is still healthy.
	_, err = tg.client.AppendToStream(ctx(t), stream("small"), esdb.AppendToStreamOptions{}, event("E", `{}`))
	assert.NoError(t, err)
}
