package httpagent_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpagent"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes/agentruntime"
)

// seen is a request as the server received it.
type seen struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Host                   string
	Body                   []byte
}

// recorder is a test server that records requests and answers with reply.
type recorder struct {
	*httptest.Server
	mu    sync.Mutex
	got   []seen
	calls atomic.Int64
}

func newRecorder(t *testing.T, reply http.HandlerFunc) *recorder {
	t.Helper()
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.calls.Add(1)
		r.mu.Lock()
		r.got = append(r.got, seen{Method: req.Method, Path: req.URL.EscapedPath(), RawQuery: req.URL.RawQuery, Header: req.Header.Clone(), Host: req.Host, Body: body})
		r.mu.Unlock()
		reply(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) last(t *testing.T) seen {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.got, "the server received no request")
	return r.got[len(r.got)-1]
}

func answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func command(call *domain.HTTPCall) protocol.ExecuteStep {
	return protocol.ExecuteStep{
		TaskID: "o-1", Workflow: "signup", WorkflowVersion: 2, Step: "create-account", Agent: domain.HTTPAgent,
		Action: protocol.ActionExecute, Attempt: 1, CompleteBy: time.Now().Add(time.Minute), IdempotencyKey: "o-1/create-account",
		Order:   json.RawMessage(`{"orderId":"o-1","user":{"id":"a b/c?d","email":"ann@example.com","note":"hi\r\nX-Evil: 1"},"amount":12.5,"items":[{"sku":"s1"}]}`),
		Results: map[string]json.RawMessage{"reserve": json.RawMessage(`{"reservationId":"r-9"}`)},
		HTTP:    call,
	}
}

func handle(t *testing.T, h *httpagent.Handler, cmd protocol.ExecuteStep) (json.RawMessage, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return h.Handle(ctx, cmd)
}

func TestTemplatedCallReachesTheServer(t *testing.T) {
	srv := newRecorder(t, answer(http.StatusOK, `{ "accountId" : "acc-1" }`))
	h := httpagent.New(httpagent.Config{})
	cmd := command(&domain.HTTPCall{
		Method:  "PUT",
		URL:     srv.URL + "/accounts/{{order.user.id}}?reservation={{results.reserve.reservationId}}&try={{attempt}}",
		Headers: map[string]string{"X-Customer": "{{order.user.email}}", "Authorization": "Bearer fixed"},
		Body:    json.RawMessage(`{"amount":"{{order.amount}}","items":"{{order.items}}","note":"task {{task.id}} v{{task.version}}","key":"{{idempotencyKey}}"}`),
	})
	cmd.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	result, err := handle(t, h, cmd)
	require.NoError(t, err)
	assert.JSONEq(t, `{"accountId":"acc-1"}`, string(result))
	assert.Equal(t, `{"accountId":"acc-1"}`, string(result), "the result is compacted")

	got := srv.last(t)
	assert.Equal(t, http.MethodPut, got.Method)
	assert.Equal(t, "/accounts/a%20b%2Fc%3Fd", got.Path, "a value cannot add a path segment or a query")
	q, err := url.ParseQuery(got.RawQuery)
	require.NoError(t, err)
	assert.Equal(t, url.Values{"reservation": {"r-9"}, "try": {"1"}}, q)
	assert.Equal(t, "ann@example.com", got.Header.Get("X-Customer"))
	assert.Equal(t, "Bearer fixed", got.Header.Get("Authorization"))
	assert.Equal(t, "o-1/create-account", got.Header.Get(httpagent.IdempotencyKeyHeader))
	assert.Equal(t, protocol.ActionExecute, got.Header.Get(httpagent.ActionHeader))
	assert.Equal(t, cmd.TraceParent, got.Header.Get("traceparent"))
	assert.Equal(t, "application/json", got.Header.Get("Content-Type"))
	assert.JSONEq(t, `{"amount":12.5,"items":[{"sku":"s1"}],"note":"task o-1 v2","key":"o-1/create-account"}`, string(got.Body),
		"a string that is exactly one placeholder keeps the value's JSON type")
}

func TestDefaultBodyAndMethods(t *testing.T) {
	srv := newRecorder(t, answer(http.StatusNoContent, ""))
	h := httpagent.New(httpagent.Config{})

	result, err := handle(t, h, command(&domain.HTTPCall{Method: http.MethodPost, URL: srv.URL + "/accounts"}))
	require.NoError(t, err)
	assert.Nil(t, result, "an empty answer is no result")
	assert.JSONEq(t, `{"taskId":"o-1","workflow":"signup","workflowVersion":2,"step":"create-account","action":"execute","attempt":1,
		"idempotencyKey":"o-1/create-account","order":{"orderId":"o-1","user":{"id":"a b/c?d","email":"ann@example.com","note":"hi\r\nX-Evil: 1"},"amount":12.5,"items":[{"sku":"s1"}]},
		"results":{"reserve":{"reservationId":"r-9"}}}`, string(srv.last(t).Body), "the default body leaves out the empty fields")

	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		_, err := handle(t, h, command(&domain.HTTPCall{Method: method, URL: srv.URL + "/accounts/{{task.id}}"}))
		require.NoError(t, err)
		got := srv.last(t)
		assert.Equal(t, method, got.Method)
		assert.Equal(t, "/accounts/o-1", got.Path)
		assert.Empty(t, got.Body, "%s sends no body unless the call gives one", method)
		assert.Empty(t, got.Header.Get("Content-Type"))
		assert.Equal(t, "o-1/create-account", got.Header.Get(httpagent.IdempotencyKeyHeader))
	}
}

func TestNonJSONAnswerIsNoResult(t *testing.T) {
	srv := newRecorder(t, answer(http.StatusOK, "ok, done"))
	result, err := handle(t, httpagent.New(httpagent.Config{}), command(&domain.HTTPCall{Method: "POST", URL: srv.URL}))
	require.NoError(t, err)
	assert.Nil(t, result)
}

func TestClassification(t *testing.T) {
	cases := []struct {
		name      string
		status    int
		transient []int
		permanent []int
		want      httpagent.Class
	}{
		{"ok", 200, nil, nil, httpagent.Succeeded},
		{"created", 201, nil, nil, httpagent.Succeeded},
		{"unavailable", 503, nil, nil, httpagent.Transient},
		{"internal error", 500, nil, nil, httpagent.Transient},
		{"request timeout", 408, nil, nil, httpagent.Transient},
		{"too many requests", 429, nil, nil, httpagent.Transient},
		{"unprocessable", 422, nil, nil, httpagent.Permanent},
		{"not found", 404, nil, nil, httpagent.Permanent},
		{"conflict made transient", 409, []int{409}, nil, httpagent.Transient},
		{"unavailable made permanent", 503, nil, []int{503}, httpagent.Permanent},
		{"accepted made transient", 202, []int{202}, nil, httpagent.Transient},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			call := &domain.HTTPCall{TransientStatus: tc.transient, PermanentStatus: tc.permanent}
			assert.Equal(t, tc.want, httpagent.Classify(tc.status, call))

			srv := newRecorder(t, answer(tc.status, `{"error":"because"}`))
			call.Method, call.URL = http.MethodPost, srv.URL
			_, err := handle(t, httpagent.New(httpagent.Config{}), command(call))
			switch tc.want {
			case httpagent.Succeeded:
				require.NoError(t, err)
			case httpagent.Transient:
				require.Error(t, err)
				assert.False(t, errors.Is(err, agentruntime.ErrPermanent), "%v", err)
			case httpagent.Permanent:
				require.Error(t, err)
				assert.True(t, errors.Is(err, agentruntime.ErrPermanent), "%v", err)
			}
			if err != nil {
				assert.Contains(t, err.Error(), "answered "+strconv.Itoa(tc.status))
				assert.Contains(t, err.Error(), `{"error":"because"}`)
				var se *httpagent.StatusError
				require.True(t, errors.As(err, &se))
				assert.Equal(t, tc.status, se.Status)
			}
		})
	}
}

func TestErrorQuotesAtMost512BytesOfTheAnswer(t *testing.T) {
	srv := newRecorder(t, answer(http.StatusBadRequest, strings.Repeat("x", 5000)))
	_, err := handle(t, httpagent.New(httpagent.Config{}), command(&domain.HTTPCall{Method: "POST", URL: srv.URL + "/x?token=secret"}))
	require.Error(t, err)
	var se *httpagent.StatusError
	require.True(t, errors.As(err, &se))
	assert.LessOrEqual(t, len(se.Body), 512+len("…"))
	assert.Less(t, len(err.Error()), 700)
	assert.NotContains(t, err.Error(), "secret", "the query is left out of error texts, which are stored")
}

func TestNetworkErrorIsTransient(t *testing.T) {
	srv := newRecorder(t, answer(200, ""))
	addr := srv.URL
	srv.Close()
	_, err := handle(t, httpagent.New(httpagent.Config{}), command(&domain.HTTPCall{Method: "POST", URL: addr + "/x?token=secret"}))
	require.Error(t, err)
	assert.False(t, errors.Is(err, agentruntime.ErrPermanent))
	assert.NotContains(t, err.Error(), "secret")
}

func TestDeadlineIsTransient(t *testing.T) {
	release := make(chan struct{})
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := httpagent.New(httpagent.Config{}).Handle(ctx, command(&domain.HTTPCall{Method: "POST", URL: srv.URL}))
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	assert.False(t, errors.Is(err, agentruntime.ErrPermanent))
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		name, header string
		status       int
		want         time.Duration
		carried      bool
	}{
		{"seconds on 429", "3", http.StatusTooManyRequests, 3 * time.Second, true},
		{"date on 503", now.Add(90 * time.Second).Format(http.TimeFormat), http.StatusServiceUnavailable, 90 * time.Second, true},
		{"date in the past", now.Add(-time.Minute).Format(http.TimeFormat), http.StatusServiceUnavailable, 0, true},
		{"garbage", "soon", http.StatusServiceUnavailable, 0, false},
		{"not on 500", "3", http.StatusInternalServerError, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", tc.header)
				w.WriteHeader(tc.status)
			})
			h := httpagent.New(httpagent.Config{Clock: func() time.Time { return now }})
			_, err := handle(t, h, command(&domain.HTTPCall{Method: "POST", URL: srv.URL}))
			require.Error(t, err)
			assert.False(t, errors.Is(err, agentruntime.ErrPermanent))
			var ra interface{ RetryAfter() time.Duration }
			require.Equal(t, tc.carried, errors.As(err, &ra), "%v", err)
			if tc.carried {
				assert.Equal(t, tc.want, ra.RetryAfter())
				var rae *httpagent.RetryAfterError
				require.True(t, errors.As(err, &rae))
				assert.Equal(t, tc.want, rae.Wait)
			}
		})
	}
}

func TestTemplateErrorIsPermanentAndNamesThePlaceholder(t *testing.T) {
	srv := newRecorder(t, answer(200, ""))
	h := httpagent.New(httpagent.Config{})
	for name, call := range map[string]*domain.HTTPCall{
		"url":    {Method: "POST", URL: srv.URL + "/{{order.customer.id}}"},
		"header": {Method: "POST", URL: srv.URL, Headers: map[string]string{"X-Id": "{{order.customer.id}}"}},
		"body":   {Method: "POST", URL: srv.URL, Body: json.RawMessage(`{"a":{"b":["{{order.customer.id}}"]}}`)},
	} {
		_, err := handle(t, h, command(call))
		require.Error(t, err, name)
		assert.True(t, errors.Is(err, agentruntime.ErrPermanent), "%s: %v", name, err)
		assert.True(t, errors.Is(err, domain.ErrTemplate), "%s: %v", name, err)
		assert.Contains(t, err.Error(), "order.customer.id", name)
	}
	assert.Zero(t, srv.calls.Load(), "nothing is sent when a template cannot be rendered")
}

// TestOversizedRenderingFailsTheStepForGood: a step whose templates would
// render past MaxRenderedBytes fails for good, and nothing is sent.
func TestOversizedRenderingFailsTheStepForGood(t *testing.T) {
	srv := newRecorder(t, answer(200, ""))
	h := httpagent.New(httpagent.Config{MaxRenderedBytes: 64 << 10})
	cmd := command(&domain.HTTPCall{Method: "POST", URL: srv.URL + "/{{order.blob}}",
		Body: json.RawMessage(`{"x":"` + strings.Repeat("{{order.blob}}", 2000) + `"}`)})
	cmd.Order = json.RawMessage(`{"orderId":"o-1","blob":"` + strings.Repeat("b", 10_000) + `"}`)
	_, err := handle(t, h, cmd)
	require.Error(t, err)
	assert.True(t, errors.Is(err, agentruntime.ErrPermanent), "%v", err)
	assert.True(t, errors.Is(err, domain.ErrRenderTooLarge), "%v", err)
	assert.Contains(t, err.Error(), "render body")
	assert.Zero(t, srv.calls.Load(), "nothing is sent when the rendering is too large")
}

func TestHeaderInjectionRefused(t *testing.T) {
	srv := newRecorder(t, answer(200, ""))
	h := httpagent.New(httpagent.Config{})
	_, err := handle(t, h, command(&domain.HTTPCall{Method: "POST", URL: srv.URL, Headers: map[string]string{"X-Note": "{{order.user.note}}"}}))
	require.Error(t, err)
	assert.True(t, errors.Is(err, agentruntime.ErrPermanent))
	assert.Contains(t, err.Error(), "X-Note")

	_, err = handle(t, h, command(&domain.HTTPCall{Method: "POST", URL: srv.URL, Headers: map[string]string{"Bad Name": "x"}}))
	require.Error(t, err)
	assert.True(t, errors.Is(err, agentruntime.ErrPermanent))
	assert.Zero(t, srv.calls.Load())
}

func TestRenderedURLMustBeHTTP(t *testing.T) {
	h := httpagent.New(httpagent.Config{})
	cmd := command(&domain.HTTPCall{Method: "POST", URL: "{{order.target}}"})
	cmd.Order = json.RawMessage(`{"target":"file:///etc/passwd"}`)
	_, err := handle(t, h, cmd)
	require.Error(t, err)
	assert.True(t, errors.Is(err, agentruntime.ErrPermanent))
}

func TestBaseURLMode(t *testing.T) {
	srv := newRecorder(t, answer(http.StatusOK, `{"ok":true}`))
	h := httpagent.New(httpagent.Config{BaseURL: srv.URL + "/"})

	cmd := command(nil)
	result, err := handle(t, h, cmd)
	require.NoError(t, err)
	assert.JSONEq(t, `{"ok":true}`, string(result))
	got := srv.last(t)
	assert.Equal(t, http.MethodPost, got.Method)
	assert.Equal(t, "/create-account", got.Path)
	assert.Equal(t, protocol.ActionExecute, got.Header.Get(httpagent.ActionHeader))
	assert.Equal(t, "o-1/create-account", got.Header.Get(httpagent.IdempotencyKeyHeader))
	var body map[string]any
	require.NoError(t, json.Unmarshal(got.Body, &body))
	assert.Equal(t, "o-1", body["taskId"])
	assert.NotNil(t, body["order"])

	cmd.Action, cmd.Compensation, cmd.Result = protocol.ActionCompensate, "delete-account", json.RawMessage(`{"accountId":"acc-1"}`)
	_, err = handle(t, h, cmd)
	require.NoError(t, err)
	got = srv.last(t)
	assert.Equal(t, "/delete-account", got.Path)
	assert.Equal(t, protocol.ActionCompensate, got.Header.Get(httpagent.ActionHeader))
	require.NoError(t, json.Unmarshal(got.Body, &body))
	assert.Equal(t, map[string]any{"accountId": "acc-1"}, body["result"])

	cmd.Compensation = ""
	_, err = handle(t, h, cmd)
	require.NoError(t, err)
	assert.Equal(t, "/undo-create-account", srv.last(t).Path)

	_, err = handle(t, httpagent.New(httpagent.Config{}), command(nil))
	require.Error(t, err)
	assert.True(t, errors.Is(err, agentruntime.ErrPermanent))
	assert.True(t, errors.Is(err, httpagent.ErrNoBaseURL))
}

func TestBreakerIsPerHost(t *testing.T) {
	failing := newRecorder(t, answer(http.StatusServiceUnavailable, "down"))
	healthy := newRecorder(t, answer(http.StatusOK, `{}`))
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	h := httpagent.New(httpagent.Config{Clock: clock, BreakerOpenFor: time.Second})

	failingHost := strings.TrimPrefix(failing.URL, "http://")
	for i := 0; i < 20; i++ {
		_, err := handle(t, h, command(&domain.HTTPCall{Method: "POST", URL: failing.URL}))
		require.Error(t, err)
	}
	require.True(t, h.BreakerOpen(failingHost))
	state := h.BreakerState()
	assert.True(t, state.Open, "the agent reports the open breaker of a host it calls")
	assert.Contains(t, state.Cause, "host "+failingHost+": ")
	assert.Contains(t, state.Cause, "answered 503: down", "the root cause")
	calls := failing.calls.Load()
	_, err := handle(t, h, command(&domain.HTTPCall{Method: "POST", URL: failing.URL}))
	require.Error(t, err)
	assert.True(t, errors.Is(err, agentruntime.ErrCircuitOpen), "%v", err)
	assert.False(t, errors.Is(err, agentruntime.ErrPermanent))
	assert.Equal(t, calls, failing.calls.Load(), "an open breaker sends nothing")

	_, err = handle(t, h, command(&domain.HTTPCall{Method: "POST", URL: healthy.URL}))
	require.NoError(t, err, "another host's breaker is closed")
	assert.False(t, h.BreakerOpen(strings.TrimPrefix(healthy.URL, "http://")))

	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	state = h.BreakerState()
	assert.True(t, state.Trial && !state.Open, "after OpenFor: a trial")
	_, err = handle(t, h, command(&domain.HTTPCall{Method: "POST", URL: failing.URL}))
	require.Error(t, err)
	assert.Equal(t, calls+1, failing.calls.Load(), "after OpenFor one trial call goes through")
}

func TestPermanentAnswersDoNotOpenTheBreaker(t *testing.T) {
	srv := newRecorder(t, answer(http.StatusUnprocessableEntity, "no"))
	h := httpagent.New(httpagent.Config{})
	for i := 0; i < 30; i++ {
		_, err := handle(t, h, command(&domain.HTTPCall{Method: "POST", URL: srv.URL}))
		require.True(t, errors.Is(err, agentruntime.ErrPermanent))
	}
	assert.False(t, h.BreakerOpen(strings.TrimPrefix(srv.URL, "http://")))
}

func TestOversizedResponse(t *testing.T) {
	var size atomic.Int64
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `"`+strings.Repeat("x", int(size.Load())-2)+`"`)
	})
	h := httpagent.New(httpagent.Config{MaxResponseBytes: 100})
	call := &domain.HTTPCall{Method: "POST", URL: srv.URL}

	size.Store(100)
	result, err := handle(t, h, command(call))
	require.NoError(t, err)
	assert.Len(t, result, 100)

	size.Store(101)
	_, err = handle(t, h, command(call))
	require.Error(t, err)
	assert.True(t, errors.Is(err, httpagent.ErrResponseTooLarge), "%v", err)
	assert.False(t, errors.Is(err, agentruntime.ErrPermanent))
	assert.Contains(t, err.Error(), "response over the limit")
}

func TestDefaultLimitIsMaxResultBytes(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `"`+strings.Repeat("x", domain.MaxResultBytes)+`"`)
	})
	_, err := handle(t, httpagent.New(httpagent.Config{}), command(&domain.HTTPCall{Method: "POST", URL: srv.URL}))
	assert.True(t, errors.Is(err, httpagent.ErrResponseTooLarge), "%v", err)
}
