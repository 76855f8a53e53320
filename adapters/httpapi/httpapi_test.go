package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/adapters/taskdb"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

type checks []httpapi.Check

func (c checks) Readiness(context.Context) []httpapi.Check { return c }
func (checks) WriteMetrics(io.Writer)                      {}

func TestReadyzNamesEveryCheck(t *testing.T) {
	for _, tc := range []struct {
		checks checks
		code   int
	}{
		{checks{{Name: "projection", OK: true}, {Name: "kafka", OK: true}}, http.StatusOK},
		{checks{{Name: "projection", OK: true}, {Name: "kafka", Error: "ping: no broker"}}, http.StatusServiceUnavailable},
	} {
		srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: newView(t), Metrics: tc.checks, Readiness: tc.checks}))
		resp, err := http.Get(srv.URL + "/readyz")
		require.NoError(t, err)
		var body struct {
			Status string          `json:"status"`
			Checks []httpapi.Check `json:"checks"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		srv.Close()
		assert.Equal(t, tc.code, resp.StatusCode)
		assert.Equal(t, []httpapi.Check(tc.checks), body.Checks)
	}
}

func TestListLimitIsCapped(t *testing.T) {
	srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: newView(t), Metrics: checks{}, Readiness: checks{}}))
	defer srv.Close()
	for limit, code := range map[string]int{"5": 200, "1000000": 200, "0": 400, "x": 400} {
		resp, err := http.Get(srv.URL + "/api/tasks?limit=" + limit)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, code, resp.StatusCode, limit)
	}
}

// view is a task view over an SQLite file that is always caught up.
type view struct{ *taskdb.DB }

func (view) Ready() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func newView(t *testing.T) view {
	db, err := taskdb.Open(filepath.Join(t.TempDir(), "tasks.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return view{db}
}

func TestTasksArePagedWithACursor(t *testing.T) {
	v := newView(t)
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var tasks []*protocol.TaskView
	for i := range 230 {
		task := domain.NewTask(fmt.Sprintf("p-%03d", i))
		task.Revision, task.Workflow, task.State, task.SubmittedAt = 1, "order", domain.StateProcessed, t0.Add(time.Duration(i)*time.Millisecond)
		if i%10 == 0 {
			task.State = domain.StateError
		}
		tasks = append(tasks, protocol.ViewOf(task))
	}
	require.NoError(t, v.Commit(context.Background(), tasks, 7))
	srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: v, Metrics: checks{}, Readiness: checks{}}))
	defer srv.Close()
	var ids []string
	next := srv.URL + "/api/tasks?state=Processed&limit=50"
	for pages := 0; next != ""; pages++ {
		require.Less(t, pages, 10)
		resp, err := http.Get(next)
		require.NoError(t, err)
		var list protocol.TaskList
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, 23, list.Counts[domain.StateError], "counts cover every task")
		for _, task := range list.Tasks {
			ids = append(ids, task.ID)
		}
		next = ""
		if list.NextCursor != "" {
			next = srv.URL + "/api/tasks?state=Processed&limit=50&cursor=" + url.QueryEscape(list.NextCursor)
		}
	}
	assert.Len(t, ids, 207)
	assert.Equal(t, "p-229", ids[0], "newest first")
	for q, code := range map[string]int{"cursor=garbage!": 400, "since=yesterday": 400, "state=Lost": 400,
		"since=2026-11-22T10:00:00.1Z&until=2026-11-22T10:00:00.2Z": 200} {
		resp, err := http.Get(srv.URL + "/api/tasks?" + q)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, code, resp.StatusCode, q)
	}
}

// TestPagesServedAtOnceKeepTheirOwnRows asks for different pages from many
// clients at once, over and over: the buffers pages are built in are reused
// between requests, and no answer may carry another's rows.
func TestPagesServedAtOnceKeepTheirOwnRows(t *testing.T) {
	v := newView(t)
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	var tasks []*protocol.TaskView
	for i := range 400 {
		task := domain.NewTask(fmt.Sprintf("c-%03d", i))
		task.Revision, task.Workflow, task.State, task.SubmittedAt = 1, "order", domain.StateProcessed, t0.Add(time.Duration(i)*time.Millisecond)
		task.Reason = strings.Repeat("x", i) // rows of different sizes
		tasks = append(tasks, protocol.ViewOf(task))
	}
	require.NoError(t, v.Commit(context.Background(), tasks, 7))
	srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: v, Metrics: checks{}, Readiness: checks{}}))
	defer srv.Close()
	get := func(since int) ([]byte, error) {
		resp, err := http.Get(srv.URL + "/api/tasks?limit=37&since=" + url.QueryEscape(t0.Add(time.Duration(since)*time.Millisecond).Format(time.RFC3339Nano)))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	want := map[int][]byte{}
	for since := 0; since < 400; since += 50 {
		b, err := get(since)
		require.NoError(t, err)
		want[since] = b
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8*20)
	for w := range 8 {
		wg.Go(func() {
			for i := range 20 {
				since := ((w + i) % 8) * 50
				b, err := get(since)
				if err == nil && !bytes.Equal(b, want[since]) {
					err = fmt.Errorf("page since %d differs from the one served alone", since)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestTasksFilterByStepAndReasonAndRefuseUnknownFilters lists tasks in
// Error by the step that failed and by their reason, and refuses what a
// bulk action must never follow: a filter the API does not know (it would
// list every task), or one too long.
func TestTasksFilterByStepAndReasonAndRefuseUnknownFilters(t *testing.T) {
	v := newView(t)
	var tasks []*protocol.TaskView
	for i, failed := range []string{"charge", "reserve", "charge"} {
		task := domain.NewTask(fmt.Sprintf("e-%d", i))
		task.Revision, task.Workflow, task.State, task.SubmittedAt = 4, "order", domain.StateError, time.Date(2026, 11, 22, 10, 0, i, 0, time.UTC)
		task.Steps = []*domain.Step{{Name: "reserve", Leg: domain.Leg{State: domain.StepStateProcessed}}, {Name: "charge"}}
		task.Step(failed).State = domain.StepStateError
		task.FailedStep, task.Reason = failed, fmt.Sprintf("step %s failed: gateway answered 50%d", failed, i)
		tasks = append(tasks, protocol.ViewOf(task))
	}
	require.NoError(t, v.Commit(context.Background(), tasks, 3))
	srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: v, Metrics: checks{}, Readiness: checks{}}))
	defer srv.Close()
	list := func(query string) ([]string, int) {
		resp, err := http.Get(srv.URL + "/api/tasks?" + query)
		require.NoError(t, err)
		defer resp.Body.Close()
		var l protocol.TaskList
		_ = json.NewDecoder(resp.Body).Decode(&l)
		var ids []string
		for _, task := range l.Tasks {
			ids = append(ids, task.ID)
		}
		return ids, resp.StatusCode
	}
	for query, want := range map[string][]string{
		"state=Error&step=charge":        {"e-2", "e-0"},
		"step=reserve":                   {"e-1"},
		"reason=GATEWAY+answered+500":    {"e-0"},
		"step=charge&reason=answered+50": {"e-2", "e-0"},
		"step=ship":                      nil,
	} {
		ids, code := list(query)
		assert.Equal(t, http.StatusOK, code, query)
		assert.Equal(t, want, ids, query)
	}
	for _, query := range []string{"stat=Error", "state=Error&steps=charge", "reason=" + strings.Repeat("x", 1025)} {
		_, code := list(query)
		assert.Equal(t, http.StatusBadRequest, code, query)
	}
}

// ops records what operators did.
type ops struct{ by []string }

func (o *ops) Retry(_ context.Context, _, _, by string) error  { o.by = append(o.by, by); return nil }
func (o *ops) Cancel(_ context.Context, _, by, _ string) error { o.by = append(o.by, by); return nil }

func TestTokensRolesAndOrigins(t *testing.T) {
	viewerSecret, viewerLine, err := httpapi.NewToken("vera", httpapi.RoleViewer)
	require.NoError(t, err)
	operatorSecret, operatorLine, err := httpapi.NewToken("otto", httpapi.RoleOperator)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(file, []byte("# API tokens\n"+viewerLine+"\n"+operatorLine+"\n"), 0o600))
	tokens, err := httpapi.LoadTokens(file)
	require.NoError(t, err)
	recorded := &ops{}
	srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: newView(t), Operations: recorded, Metrics: checks{}, Readiness: checks{}, Tokens: tokens}))
	defer srv.Close()

	do := func(method, path, contentType, token, origin, body string) int {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), "no CORS, ever")
		return resp.StatusCode
	}
	cancel := "/api/tasks/o-1/cancel"
	assert.Equal(t, http.StatusUnsupportedMediaType, do(http.MethodPost, cancel, "text/plain", operatorSecret, "https://evil.example", `{"by":"mallory"}`))
	assert.Equal(t, http.StatusForbidden, do(http.MethodPost, cancel, "application/json", operatorSecret, "https://evil.example", `{}`))
	assert.Equal(t, http.StatusUnauthorized, do(http.MethodPost, cancel, "application/json", "", "", `{}`))
	assert.Equal(t, http.StatusUnauthorized, do(http.MethodPost, cancel, "application/json", "saga_forged", "", `{}`))
	assert.Equal(t, http.StatusForbidden, do(http.MethodPost, cancel, "application/json", viewerSecret, "", `{}`))
	assert.Empty(t, recorded.by, "nothing refused reached the operators' actions")
	assert.Equal(t, http.StatusAccepted, do(http.MethodPost, cancel, "application/json", operatorSecret, "", `{"by":"mallory"}`))
	assert.Equal(t, []string{"otto"}, recorded.by, "the token's identity acts, not the body's by")

	assert.Equal(t, http.StatusUnauthorized, do(http.MethodGet, "/api/tasks", "", "", "", ""))
	assert.Equal(t, http.StatusOK, do(http.MethodGet, "/api/tasks", "", viewerSecret, "", ""))
	assert.Equal(t, http.StatusUnauthorized, do(http.MethodGet, "/metrics", "", "", "", ""))
	assert.Equal(t, http.StatusOK, do(http.MethodGet, "/healthz", "", "", "", ""))
	assert.Equal(t, http.StatusOK, do(http.MethodGet, "/readyz", "", "", "", ""))

	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), operatorSecret, "only hashes are stored")
}

func TestPostsNeedJSONEvenWithoutTokens(t *testing.T) {
	srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: newView(t), Operations: &ops{}, Metrics: checks{}, Readiness: checks{}}))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/api/tasks/o-1/cancel", "text/plain", strings.NewReader(`{"by":"x"}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
}

// TestHostAllowListStopsDNSRebinding plays a page on a name rebound to the
// API's address: its requests carry that name as Host and as Origin, and
// must neither read nor act.
func TestHostAllowListStopsDNSRebinding(t *testing.T) {
	recorded := &ops{}
	srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: newView(t), Operations: recorded, Metrics: checks{}, Readiness: checks{}}))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	do := func(method, path, host, origin string) int {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(`{"by":"page"}`))
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	rebound := "rebind.attacker.example:" + port
	cancel := "/api/tasks/o-1/cancel"
	assert.Equal(t, http.StatusMisdirectedRequest, do(http.MethodPost, cancel, rebound, "http://"+rebound))
	assert.Equal(t, http.StatusMisdirectedRequest, do(http.MethodPost, cancel, rebound, ""))
	assert.Equal(t, http.StatusMisdirectedRequest, do(http.MethodGet, "/api/tasks", rebound, ""))
	assert.Equal(t, http.StatusOK, do(http.MethodGet, "/readyz", rebound, ""), "probes answer by any name")
	assert.Equal(t, http.StatusForbidden, do(http.MethodPost, cancel, "localhost:"+port, "http://localhost:3000"), "another port is another origin")
	assert.Empty(t, recorded.by, "nothing refused reached the operators' actions")

	assert.Equal(t, http.StatusOK, do(http.MethodGet, "/api/tasks", "localhost:"+port, ""))
	assert.Equal(t, http.StatusOK, do(http.MethodGet, "/api/tasks", "[::1]:"+port, ""))
	assert.Equal(t, http.StatusAccepted, do(http.MethodPost, cancel, "127.0.0.1:"+port, "http://127.0.0.1:"+port))
	assert.Equal(t, http.StatusAccepted, do(http.MethodPost, cancel, "LocalHost:"+port, "http://localhost:"+port))
	assert.Len(t, recorded.by, 2)
}

func TestAllowedHostsAreConfigured(t *testing.T) {
	hosts, err := httpapi.ParseAllowedHosts("saga.example.com, .internal.example", "saga-0:8080")
	require.NoError(t, err)
	for host, allowed := range map[string]bool{
		"saga.example.com": true, "SAGA.example.com:443": true, "a.internal.example": true, "internal.example:80": true,
		"saga-0:8080": true, "localhost": true, "10.1.2.3:8080": true, "[fe80::1]:8080": true,
		"evil.example": false, "saga.example.com.evil.example": false, "xinternal.example": false, "": false,
	} {
		assert.Equal(t, allowed, hosts.Allows(host), host)
	}
	assert.True(t, hosts.Explicit())
	anyHost, err := httpapi.ParseAllowedHosts("*", "")
	require.NoError(t, err)
	assert.True(t, anyHost.Allows("whatever.example"))
	_, err = httpapi.ParseAllowedHosts("http://saga.example.com", "")
	require.ErrorIs(t, err, httpapi.ErrAllowedHosts)
}
