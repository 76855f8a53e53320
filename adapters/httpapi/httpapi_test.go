package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/adapters/taskdb"
	"github.com/sagaengine/saga/domain"
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
		srv := httptest.NewServer(httpapi.Handler(newView(t), nil, nil, tc.checks, tc.checks))
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
	srv := httptest.NewServer(httpapi.Handler(newView(t), nil, nil, checks{}, checks{}))
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
	var tasks []*domain.Task
	for i := range 230 {
		task := domain.NewTask(fmt.Sprintf("p-%03d", i))
		task.Revision, task.Workflow, task.State, task.SubmittedAt = 1, "order", domain.StateProcessed, t0.Add(time.Duration(i)*time.Millisecond)
		if i%10 == 0 {
			task.State = domain.StateError
		}
		tasks = append(tasks, task)
	}
	require.NoError(t, v.Commit(context.Background(), tasks, 7))
	srv := httptest.NewServer(httpapi.Handler(v, nil, nil, checks{}, checks{}))
	defer srv.Close()
	var ids []string
	next := srv.URL + "/api/tasks?state=Processed&limit=50"
	for pages := 0; next != ""; pages++ {
		require.Less(t, pages, 10)
		resp, err := http.Get(next)
		require.NoError(t, err)
		var list httpapi.TaskList
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
