package esdbserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/serverfeatures"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/esdbwire"
	"github.com/sagaengine/saga/adapters/secure"
)

// operationsConn is a raw gRPC connection for the Operations service,
// which the official Go clients do not have.
func operationsConn(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	opts = append(opts, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(esdbwire.NewCodec())))
	conn, err := grpc.NewClient(addr, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// completedScavenge waits for the $scavengeCompleted event of scavenge id
// in $scavenges.
func completedScavenge(t *testing.T, c *esdb.Client, id string) esdbserver.ScavengeCompleted {
	t.Helper()
	var done esdbserver.ScavengeCompleted
	require.Eventually(t, func() bool {
		evs, err := readStream(t, c, esdbserver.ScavengesStream, esdb.ReadStreamOptions{}, 1000)
		if err != nil {
			return false
		}
		for _, e := range evs {
			if e.Event.EventType == esdbserver.ScavengeCompletedEventType {
				require.NoError(t, json.Unmarshal(e.Event.Data, &done))
				if done.ScavengeID == id {
					return true
				}
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond)
	return done
}

// TestStartScavengeThroughOperations starts a scavenge as KurrentDB's
// clients do: the answer names it, its end is recorded in $scavenges with
// what it removed, the tombstoned stream's space is reclaimed and the other
// streams read as before; StopScavenge of an unknown id is NotFound.
func TestStartScavengeThroughOperations(t *testing.T) {
	dir := t.TempDir()
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: dir, SegmentSize: 64 << 10})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	c := connect(t, "esdb://"+srv.Addr()+"?tls=false")
	defer c.Close()

	gone, kept := stream("gone"), stream("kept")
	big := strings.Repeat("x", 4<<10)
	for i := range 100 {
		name := gone
		if i%10 == 0 {
			name = kept
		}
		_, err := c.AppendToStream(ctx(t), name, esdb.AppendToStreamOptions{}, event("Big", `{"x":"`+big+`"}`))
		require.NoError(t, err)
	}
	_, err = c.TombstoneStream(ctx(t), gone, esdb.TombstoneStreamOptions{})
	require.NoError(t, err)
	_, err = c.AppendToStream(ctx(t), stream("later"), esdb.AppendToStreamOptions{}, events(1, "E")...)
	require.NoError(t, err)
	before, err := readStream(t, c, kept, esdb.ReadStreamOptions{}, 100)
	require.NoError(t, err)

	conn := operationsConn(t, srv.Addr())
	var resp esdbserver.ScavengeResp
	require.NoError(t, conn.Invoke(ctx(t), esdbserver.StartScavengeMethod, &esdbserver.StartScavengeReq{ThreadCount: 1}, &resp))
	assert.Equal(t, esdbserver.ScavengeStarted, resp.Result)
	require.NotEmpty(t, resp.ScavengeID)
	done := completedScavenge(t, c, resp.ScavengeID)
	t.Logf("%+v", done)
	assert.Equal(t, "Success", done.Result)
	assert.GreaterOrEqual(t, done.EventsRemoved, int64(80), "most of the tombstoned stream's 90 events are in closed segments")
	assert.Positive(t, done.SpaceSaved)

	after, err := readStream(t, c, kept, esdb.ReadStreamOptions{}, 100)
	require.NoError(t, err)
	require.Len(t, after, len(before))
	for i := range before {
		assert.Equal(t, before[i].Event.EventID, after[i].Event.EventID)
		assert.Equal(t, before[i].Event.Position, after[i].Event.Position, "positions do not move")
	}
	_, err = readStream(t, c, gone, esdb.ReadStreamOptions{}, 100)
	assert.Equal(t, esdb.ErrorCodeStreamDeleted, code(err))

	err = conn.Invoke(ctx(t), esdbserver.StopScavengeMethod, &esdbserver.StopScavengeReq{ScavengeID: "no-such-scavenge"}, &resp)
	assert.Equal(t, codes.NotFound, status.Code(err), "%v", err)

	features, err := serverfeatures.NewServerFeaturesClient(conn).GetSupportedMethods(ctx(t), &shared.Empty{})
	require.NoError(t, err)
	var announced []string
	for _, m := range features.GetMethods() {
		if m.GetServiceName() == "event_store.client.operations.operations" {
			announced = append(announced, m.GetMethodName())
		}
	}
	assert.ElementsMatch(t, []string{"startscavenge", "stopscavenge"}, announced)
}

// TestScavengeIsForAdmins: on a secure server, only members of $admins may
// start or stop a scavenge.
func TestScavengeIsForAdmins(t *testing.T) {
	files, err := secure.Prepare(filepath.Join(t.TempDir(), "secure"))
	require.NoError(t, err)
	tlsCfg, err := files.ServerTLS()
	require.NoError(t, err)
	hash, err := esdbserver.HashPassword("pw")
	require.NoError(t, err)
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), TLS: tlsCfg,
		Users: []esdbserver.User{{Name: "ops", Hash: hash, Groups: []string{esdbserver.AdminsGroup}}, {Name: "app", Hash: hash}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	pem, err := os.ReadFile(files.CA)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pem))
	as := func(user string) *grpc.ClientConn {
		return operationsConn(t, srv.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots})),
			grpc.WithPerRPCCredentials(basic{"Basic " + base64.StdEncoding.EncodeToString([]byte(user+":pw"))}))
	}
	var resp esdbserver.ScavengeResp
	err = as("app").Invoke(ctx(t), esdbserver.StartScavengeMethod, &esdbserver.StartScavengeReq{}, &resp)
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	err = as("app").Invoke(ctx(t), esdbserver.StopScavengeMethod, &esdbserver.StopScavengeReq{ScavengeID: "x"}, &resp)
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.NoError(t, as("ops").Invoke(ctx(t), esdbserver.StartScavengeMethod, &esdbserver.StartScavengeReq{}, &resp))
	assert.NotEmpty(t, resp.ScavengeID)
}

type basic struct{ header string }

func (b basic) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.header}, nil
}

func (basic) RequireTransportSecurity() bool { return true }
