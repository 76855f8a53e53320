package httpagent_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpagent"
)

// TestTheDefaultClientBoundsConnectionsPerHost: more calls at once than
// MaxConnsPerHost to one slow service open no more than MaxConnsPerHost
// connections; the others wait for one and all are answered.
func TestTheDefaultClientBoundsConnectionsPerHost(t *testing.T) {
	release := make(chan struct{})
	var conns, arrived atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		<-release
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	client := httpagent.NewClient(nil)
	calls := httpagent.MaxConnsPerHost + 44
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			if err == nil {
				var resp *http.Response
				if resp, err = client.Do(req); err == nil {
					resp.Body.Close()
				}
			}
			errs <- err
		})
	}
	require.Eventually(t, func() bool { return arrived.Load() == int64(httpagent.MaxConnsPerHost) }, 20*time.Second, 5*time.Millisecond,
		"as many calls as connections reach the service")
	assert.EqualValues(t, httpagent.MaxConnsPerHost, conns.Load(), "the other calls wait for a connection")
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.EqualValues(t, calls, arrived.Load())
	assert.EqualValues(t, httpagent.MaxConnsPerHost, conns.Load(), "the waiting calls reused the connections")
}
