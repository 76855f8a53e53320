package httpagent_test

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpagent"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes/agentruntime"
)

// manualClock is a clock the test moves.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestAHangingHostHoldsNoOtherHost: with HealthByTarget, once a call to
// one host has run past HangAfter, calls to that host are refused naming
// it, calls to another host go on; after BreakerOpenFor one trial goes
// through, and its answer ends the hang.
func TestAHangingHostHoldsNoOtherHost(t *testing.T) {
	clock := &manualClock{now: time.Now()}
	release := make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	arrived := make(chan struct{}, 10)
	slow := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = w.Write([]byte(`{}`))
	})
	fast := newRecorder(t, answer(http.StatusOK, `{"fast":true}`))
	h := httpagent.New(httpagent.Config{HealthByTarget: true, HangAfter: 2 * time.Second, BreakerOpenFor: time.Second, Clock: clock.Now})
	slowHost := hostOf(t, slow.URL)

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := h.Handle(ctx, command(&domain.HTTPCall{Method: http.MethodGet, URL: slow.URL + "/hang"}))
		done <- err
	}()
	<-arrived
	clock.Advance(2100 * time.Millisecond)

	_, err := handle(t, h, command(&domain.HTTPCall{Method: http.MethodGet, URL: slow.URL + "/other"}))
	var open *agentruntime.CircuitOpenError
	require.True(t, errors.As(err, &open), "%v", err)
	assert.Equal(t, slowHost, open.Target)
	assert.Contains(t, open.Cause, "calls hang")
	assert.True(t, errors.Is(err, agentruntime.ErrCircuitOpen))

	result, err := handle(t, h, command(&domain.HTTPCall{Method: http.MethodGet, URL: fast.URL}))
	require.NoError(t, err, "another host is called while one hangs")
	assert.JSONEq(t, `{"fast":true}`, string(result))

	// After BreakerOpenFor one trial goes through; its answer ends the hang.
	clock.Advance(time.Second)
	_, err = handle(t, h, command(&domain.HTTPCall{Method: http.MethodGet, URL: slow.URL + "/other"}))
	require.NoError(t, err, "the trial call")
	_, err = handle(t, h, command(&domain.HTTPCall{Method: http.MethodGet, URL: slow.URL + "/other"}))
	require.NoError(t, err, "calls go through once the trial answered")
	releaseOnce.Do(func() { close(release) })
	require.NoError(t, <-done)
}

// TestWithoutHealthByTargetNoHostIsRefusedForHanging: the default leaves
// hangs to the agent, which judges the instance as a whole.
func TestWithoutHealthByTargetNoHostIsRefusedForHanging(t *testing.T) {
	clock := &manualClock{now: time.Now()}
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	slow := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			arrived <- struct{}{}
			<-release
		}
	})
	h := httpagent.New(httpagent.Config{Clock: clock.Now})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = handle(t, h, command(&domain.HTTPCall{Method: http.MethodGet, URL: slow.URL + "/hang"}))
	}()
	<-arrived
	clock.Advance(time.Minute)
	_, err := handle(t, h, command(&domain.HTTPCall{Method: http.MethodGet, URL: slow.URL + "/other"}))
	assert.NoError(t, err)
	close(release)
	<-done
}

func hostOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u.Host
}
