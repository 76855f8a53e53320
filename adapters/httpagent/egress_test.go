package httpagent_test

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpagent"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes/agentruntime"
)

// redirector answers every request with a redirect to location.
func redirector(t *testing.T, status int, location func() string) *recorder {
	return newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", location())
		w.WriteHeader(status)
	})
}

// TestRedirectsAreNotFollowedByDefault: a service answering 307 to
// another service (saga's own API, say) is the answer: a permanent
// failure, and the other service is never called.
func TestRedirectsAreNotFollowedByDefault(t *testing.T) {
	other := newRecorder(t, answer(http.StatusAccepted, `{"cancelled":true}`))
	for _, status := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			srv := redirector(t, status, func() string { return other.URL + "/api/tasks/o-2/cancel" })
			result, err := handle(t, httpagent.New(httpagent.Config{}), command(&domain.HTTPCall{Method: http.MethodPost, URL: srv.URL + "/charge"}))
			require.Error(t, err)
			assert.Nil(t, result)
			assert.True(t, errors.Is(err, agentruntime.ErrPermanent), "%v", err)
			assert.Contains(t, err.Error(), "answered "+strconv.Itoa(status))
			assert.Contains(t, err.Error(), "followRedirects")
			assert.Zero(t, other.calls.Load(), "the redirect's target was called")
		})
	}
}

// TestFollowRedirectsStaysOnTheStepsHost: a step that follows redirects
// follows them on its own host, and refuses one to another host.
func TestFollowRedirectsStaysOnTheStepsHost(t *testing.T) {
	var srv *recorder
	srv = newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", http.StatusTemporaryRedirect)
			return
		}
		_, _ = w.Write([]byte(`{"at":"new"}`))
	})
	h := httpagent.New(httpagent.Config{})
	result, err := handle(t, h, command(&domain.HTTPCall{Method: http.MethodPost, URL: srv.URL + "/old", FollowRedirects: true}))
	require.NoError(t, err)
	assert.JSONEq(t, `{"at":"new"}`, string(result))

	other := newRecorder(t, answer(http.StatusOK, `{"secret":"data"}`))
	// 127.0.0.1 and localhost are different hosts to the agent.
	u, _ := url.Parse(other.URL)
	elsewhere := "http://localhost:" + u.Port() + "/api/workflows/x"
	away := redirector(t, http.StatusFound, func() string { return elsewhere })
	_, err = handle(t, h, command(&domain.HTTPCall{Method: http.MethodGet, URL: away.URL, FollowRedirects: true}))
	require.Error(t, err)
	assert.True(t, errors.Is(err, httpagent.ErrRedirectRefused), "%v", err)
	assert.True(t, errors.Is(err, agentruntime.ErrPermanent), "%v", err)
	assert.Zero(t, other.calls.Load())
}

// TestEgressRefusesLinkLocalLoopbackAndOwnListeners: the policy refuses
// link-local addresses always, loopback unless allowed, saga's own
// listeners unless named with their port, and addresses outside a given
// allow-list.
func TestEgressRefusesLinkLocalLoopbackAndOwnListeners(t *testing.T) {
	addr := netip.MustParseAddr
	open, err := httpagent.NewEgress(httpagent.EgressPolicy{AllowLoopback: true})
	require.NoError(t, err)
	open.AddOwn("127.0.0.1:8080")
	assert.NoError(t, open.Check("api.example.com", addr("203.0.113.7"), 443))
	assert.NoError(t, open.Check("127.0.0.1", addr("127.0.0.1"), 9000))
	for _, refused := range []struct {
		host string
		ip   netip.Addr
		port int
	}{
		{"169.254.169.254", addr("169.254.169.254"), 80},
		{"metadata.example", addr("169.254.169.254"), 80},
		{"fe80::1", addr("fe80::1"), 80},
		{"0.0.0.0", addr("0.0.0.0"), 80},
		{"localhost", addr("127.0.0.1"), 8080},
		{"127.0.0.2", addr("127.0.0.2"), 8080},
		{"::ffff:169.254.1.1", addr("::ffff:169.254.1.1"), 80},
	} {
		err := open.Check(refused.host, refused.ip, refused.port)
		assert.True(t, errors.Is(err, httpagent.ErrEgressRefused), "%s %s: %v", refused.host, refused.ip, err)
	}

	strict, err := httpagent.NewEgress(httpagent.EgressPolicy{Allow: []string{"*.example.com", "10.0.0.0/8", "127.0.0.1:8080", "169.254.169.254"}})
	require.NoError(t, err)
	strict.AddOwn("127.0.0.1:8080")
	assert.NoError(t, strict.Check("api.example.com", addr("203.0.113.7"), 443))
	assert.NoError(t, strict.Check("10.1.2.3", addr("10.1.2.3"), 80))
	assert.NoError(t, strict.Check("127.0.0.1", addr("127.0.0.1"), 8080), "saga's listener named with its port")
	assert.NoError(t, strict.Check("169.254.169.254", addr("169.254.169.254"), 80), "a link-local address named")
	for _, refused := range []netip.Addr{addr("203.0.113.7"), addr("127.0.0.1"), addr("192.168.1.1")} {
		assert.True(t, errors.Is(strict.Check("other.test", refused, 80), httpagent.ErrEgressRefused), "%s", refused)
	}
	// A name on the list that resolves to loopback or link-local is still
	// refused: the address connected to is checked too.
	assert.True(t, errors.Is(strict.Check("evil.example.com", addr("127.0.0.1"), 80), httpagent.ErrEgressRefused))
	assert.True(t, errors.Is(strict.Check("evil.example.com", addr("169.254.169.253"), 80), httpagent.ErrEgressRefused))

	_, err = httpagent.NewEgress(httpagent.EgressPolicy{Allow: []string{"10.0.0.0/33", "a b", "host:0"}})
	require.Error(t, err)
	for _, bad := range []string{"10.0.0.0/33", "a b", "host:0"} {
		assert.Contains(t, err.Error(), bad)
	}
}

// TestEgressIsCheckedWhenConnecting: the policy holds at connection
// time: for a name, against what it resolves to (so that rebinding it
// changes nothing), for saga's own listener, and for a redirect.
func TestEgressIsCheckedWhenConnecting(t *testing.T) {
	own := newRecorder(t, answer(http.StatusAccepted, `{"cancelled":true}`))
	egress, err := httpagent.NewEgress(httpagent.EgressPolicy{AllowLoopback: true})
	require.NoError(t, err)
	egress.AddOwn(own.Listener.Addr().String())
	h := httpagent.New(httpagent.Config{Egress: egress})

	// By name: localhost resolves to loopback, saga's listener.
	_, port, _ := net.SplitHostPort(own.Listener.Addr().String())
	_, err = handle(t, h, command(&domain.HTTPCall{Method: http.MethodPost, URL: "http://localhost:" + port + "/api/tasks/o-2/cancel"}))
	require.Error(t, err)
	assert.True(t, errors.Is(err, httpagent.ErrEgressRefused), "%v", err)
	assert.True(t, errors.Is(err, agentruntime.ErrPermanent), "%v", err)
	assert.Contains(t, err.Error(), "saga's own listeners")

	// Through a redirect the step follows.
	srv := redirector(t, http.StatusTemporaryRedirect, func() string { return "http://127.0.0.1:" + port + "/api/tasks/o-2/cancel" })
	_, err = handle(t, h, command(&domain.HTTPCall{Method: http.MethodPost, URL: srv.URL, FollowRedirects: true}))
	require.Error(t, err)
	assert.Zero(t, own.calls.Load(), "saga's own listener was called")

	// The metadata address, by address.
	_, err = handle(t, h, command(&domain.HTTPCall{Method: http.MethodGet, URL: "http://169.254.169.254/latest/meta-data/"}))
	assert.True(t, errors.Is(err, httpagent.ErrEgressRefused), "%v", err)

	// Loopback refused when not allowed.
	strict := httpagent.New(httpagent.Config{Egress: mustEgress(t, httpagent.EgressPolicy{Allow: []string{"api.example.com"}})})
	other := newRecorder(t, answer(http.StatusOK, `{}`))
	_, err = handle(t, strict, command(&domain.HTTPCall{Method: http.MethodGet, URL: other.URL}))
	assert.True(t, errors.Is(err, httpagent.ErrEgressRefused), "%v", err)
	assert.Zero(t, other.calls.Load())
}

func mustEgress(t *testing.T, p httpagent.EgressPolicy) *httpagent.Egress {
	t.Helper()
	e, err := httpagent.NewEgress(p)
	require.NoError(t, err)
	return e
}
