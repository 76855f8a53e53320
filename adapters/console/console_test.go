package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/console"
	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/projections"
	"github.com/sagaengine/saga/projections/audittest"
)

// oneTask is a task view and event store holding audittest's compensated
// task o-1.
type oneTask struct{ view *protocol.TaskView }

func newOneTask(t *testing.T) oneTask {
	a, err := projections.BuildAudit("o-1", audittest.History(), projections.Cut{})
	require.NoError(t, err)
	return oneTask{a.State}
}

func (o oneTask) Get(_ context.Context, id string) (*protocol.TaskView, bool, error) {
	return o.view, id == o.view.ID, nil
}
func (o oneTask) List(_ context.Context, q projections.TaskQuery) (projections.TaskPage, error) {
	if !q.Matches(o.view) {
		return projections.TaskPage{}, nil
	}
	return projections.TaskPage{Tasks: []*protocol.TaskView{o.view}}, nil
}
func (o oneTask) Counts(context.Context) (map[domain.TaskState]int, error) { return nil, nil }
func (o oneTask) Ready() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
func (o oneTask) ReadStream(_ context.Context, stream string) ([]domain.RecordedEvent, error) {
	if stream != domain.TaskStream("o-1") {
		return nil, nil
	}
	return audittest.History(), nil
}

type recorder struct{ by []string }

func (r *recorder) Retry(_ context.Context, _, _, by string) error {
	r.by = append(r.by, by)
	return nil
}
func (r *recorder) Cancel(_ context.Context, _, by, _ string) error {
	r.by = append(r.by, by)
	return nil
}

type noChecks struct{}

func (noChecks) Readiness(context.Context) []httpapi.Check { return nil }
func (noChecks) WriteMetrics(io.Writer)                    {}

func serve(t *testing.T, tokens *httpapi.Tokens, ops httpapi.Operations) *httptest.Server {
	tasks := newOneTask(t)
	ui := console.Handler(console.Config{Tasks: tasks, History: tasks, Tokens: tokens})
	srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: tasks, Operations: ops, Metrics: noChecks{}, Readiness: noChecks{}, Tokens: tokens, Mounts: []httpapi.Mount{{Pattern: console.Pattern, Handler: ui}}}))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestTaskPageDrawsTheTimelineFromTheHistory(t *testing.T) {
	srv := serve(t, nil, &recorder{})
	code, body := get(t, srv.Client(), srv.URL+"/ui/tasks/o-1")
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `<svg class="timeline"`)
	assert.Contains(t, body, `data-step="schedule-shipping"`)
	assert.Equal(t, 3, strings.Count(body, `class="bar timeout"`), "shipping hung three times")
	assert.Contains(t, body, `class="bar ok comp"`, "the undone steps")
	assert.Equal(t, 2, strings.Count(body, `<line class="backoff"`), "shipping's two retries waited out their backoff")
	assert.Contains(t, body, "backoff until +5.3s")
	assert.Contains(t, body, "TaskCompensated")
	code, _ = get(t, srv.Client(), srv.URL+"/ui/tasks/nope")
	assert.Equal(t, http.StatusNotFound, code)
	code, body = get(t, srv.Client(), srv.URL+"/ui/?state=Nonsense")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "unknown state")
}

func TestTimelineEscapesWhatItShows(t *testing.T) {
	rows := []projections.AuditRow{
		{Event: domain.StepDispatchedType, Step: "<script>", Attempt: 1, Details: `"><img src=x>`},
		{Event: domain.StepFailedType, Step: "<script>", Attempt: 1},
	}
	svg := string(console.BuildTimeline(rows).SVG())
	assert.NotContains(t, svg, "<script>")
	assert.NotContains(t, svg, "<img")
	assert.Contains(t, svg, `class="bar failed"`)
}

// TestLoginSetsAStrictCookieAndActionsNeedTheCSRFHeader follows a browser:
// the console sends it to the login, the login sets an HttpOnly,
// SameSite=Strict cookie, the cookie reads, and acting with it needs the
// CSRF header the page carries.
func TestLoginSetsAStrictCookieAndActionsNeedTheCSRFHeader(t *testing.T) {
	secret, line, err := httpapi.NewToken("olga", httpapi.RoleOperator)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(file, []byte(line+"\n"), 0o600))
	tokens, err := httpapi.LoadTokens(file)
	require.NoError(t, err)
	ops := &recorder{}
	srv := serve(t, tokens, ops)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar}

	code, body := get(t, c, srv.URL+"/ui/tasks/o-1")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `name="token"`, "redirected to the login")
	assert.Contains(t, body, `value="/ui/tasks/o-1"`, "and back after it")

	resp, err := c.PostForm(srv.URL+"/ui/login", url.Values{"token": {"saga_wrong"}})
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	noFollow := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noFollow.PostForm(srv.URL+"/ui/login", url.Values{"token": {secret}, "next": {"//evil.example/"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/ui/", resp.Header.Get("Location"), "no redirect out of the console")
	cookies := resp.Cookies()
	require.Len(t, cookies, 1)
	assert.Equal(t, httpapi.SessionCookie, cookies[0].Name)
	assert.True(t, cookies[0].HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite)

	code, body = get(t, c, srv.URL+"/ui/tasks/o-1")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "Signed in as <strong>olga</strong>")
	assert.Contains(t, body, `name="saga-csrf" content="`+httpapi.CSRFToken(secret)+`"`)
	code, _ = get(t, c, srv.URL+"/api/tasks/o-1")
	assert.Equal(t, http.StatusOK, code, "the cookie reads the API")

	retry := func(csrf, origin string) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/tasks/o-1/retry", strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if csrf != "" {
			req.Header.Set(httpapi.CSRFHeader, csrf)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusForbidden, retry("", ""), "no CSRF header")
	assert.Equal(t, http.StatusForbidden, retry("0123", ""), "a wrong one")
	assert.Equal(t, http.StatusForbidden, retry(httpapi.CSRFToken(secret), "https://evil.example"))
	assert.Empty(t, ops.by)
	assert.Equal(t, http.StatusAccepted, retry(httpapi.CSRFToken(secret), srv.URL))
	assert.Equal(t, []string{"olga"}, ops.by)

	resp, err = c.PostForm(srv.URL+"/ui/login", url.Values{"token": {secret}})
	require.NoError(t, err)
	resp.Body.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/ui/login", strings.NewReader("token="+secret))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, "no login from another origin")
}

func TestStaticFilesAndPagesCarryAStrictPolicy(t *testing.T) {
	srv := serve(t, nil, &recorder{})
	for _, path := range []string{"/ui/static/console.js", "/ui/static/console.css", "/ui/"} {
		resp, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'", path)
	}
}

func TestOverviewShowsWhatTheMetricsCountedBetweenSamples(t *testing.T) {
	reg := prometheus.NewRegistry()
	orders := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saga_orders_total"}, []string{"outcome"})
	took := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "saga_order_duration_seconds", Buckets: []float64{.1, .5, 1}}, []string{"workflow", "outcome"})
	agents := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "saga_agent_commands_total"}, []string{"agent", "outcome"})
	reg.MustRegister(orders, took, agents)
	orders.WithLabelValues("accepted").Add(10) // before the first sample: not shown
	tasks := newOneTask(t)
	srv := httptest.NewServer(console.Handler(console.Config{Tasks: tasks, History: tasks, Metrics: reg}))
	defer srv.Close()

	code, body := get(t, srv.Client(), srv.URL+"/ui/overview")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "Collecting the first samples")
	orders.WithLabelValues("accepted").Add(4)
	for range 3 {
		took.WithLabelValues("order", "processed").Observe(0.2)
	}
	took.WithLabelValues("order", "compensated").Observe(0.8)
	agents.WithLabelValues("payment", "succeeded").Add(3)
	agents.WithLabelValues("payment", "failed").Add(1)

	code, body = get(t, srv.Client(), srv.URL+"/ui/overview")
	require.Equal(t, http.StatusOK, code)
	row := body[strings.Index(body, "last minute"):]
	row = row[:strings.Index(row, "</tr>")]
	assert.Contains(t, row, "<td>3</td><td>1</td><td>0</td>", "processed, compensated, failed")
	assert.Contains(t, row, "<td>350ms</td>", "the mean of 0.2, 0.2, 0.2 and 0.8 s")
	assert.Contains(t, body, `<tr data-agent="payment"><th scope="row">payment</th><td>3</td><td>1</td>`)
	assert.Contains(t, body, `<svg class="series"`)
}

// TestTasksPageFiltersByPriority: the tasks page passes its priority filter
// on to the task view (and to the API query its script polls), shows each
// task's priority, and refuses a priority that does not exist.
func TestTasksPageFiltersByPriority(t *testing.T) {
	srv := serve(t, nil, &recorder{})
	code, body := get(t, srv.Client(), srv.URL+"/ui/?priority=high")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "No task matches.", "o-1 is a normal task")
	assert.Contains(t, body, `data-api-query="limit=`)
	assert.Contains(t, body, "priority=high")

	code, body = get(t, srv.Client(), srv.URL+"/ui/?priority=normal")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `href="/ui/tasks/o-1"`)
	assert.Contains(t, body, "<td>normal</td>")

	code, body = get(t, srv.Client(), srv.URL+"/ui/?priority=urgent")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "unknown priority")
}

// TestTaskPageShowsCallsAndWorkGivenBack: a step's calls, the instance
// that answered, the attempts given back and why, and why a step waits.
func TestTaskPageShowsCallsAndWorkGivenBack(t *testing.T) {
	tasks := newOneTask(t)
	pay := tasks.view.Steps[1]
	pay.Tries, pay.Instance, pay.Returned, pay.LastReturn = 7, "pay-2/payment", 2, "pay-1/payment: calls hang: oldest in flight 3s"
	tasks.view.Steps[2].WaitReason = "at capacity: shipping takes 4 at once on 1 healthy instance"
	ui := console.Handler(console.Config{Tasks: tasks, History: tasks})
	srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: tasks, Operations: &recorder{}, Metrics: noChecks{}, Readiness: noChecks{}, Mounts: []httpapi.Mount{{Pattern: console.Pattern, Handler: ui}}}))
	t.Cleanup(srv.Close)
	code, body := get(t, srv.Client(), srv.URL+"/ui/tasks/o-1")
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "<td>7</td>")
	assert.Contains(t, body, "<small>pay-2/payment</small>")
	assert.Contains(t, body, "2 given back")
	assert.Contains(t, body, "given back: pay-1/payment: calls hang: oldest in flight 3s")
	assert.Contains(t, body, "waits: at capacity: shipping takes 4 at once on 1 healthy instance")
}
