// Package httpapi serves saga's HTTP API: the current state of tasks from the
// task projection.
//
//	GET  /api/tasks/{id}          one task, 404 if unknown
//	GET  /api/tasks?state=S       tasks in state S (all when omitted), &limit=N
//	POST /api/tasks/{id}/retry    {"step": "...", "by": "..."}: retry a task in Error
//	POST /api/tasks/{id}/cancel   {"by": "...", "reason": "..."}: cancel (compensate) a task
//	GET  /healthz                 200 once the projection has caught up
//	GET  /metrics                 counters in the Prometheus text format
//
// The actions answer 202 once the request is recorded; the task's state
// follows as the scheduler carries it out.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections"
)

// DefaultListen is the API's default address.
const DefaultListen = "127.0.0.1:8080"

// Operations are the operators' actions on tasks.
type Operations interface {
	Retry(ctx context.Context, taskID, step, by string) error
	Cancel(ctx context.Context, taskID, by, reason string) error
}

// Metrics writes counters in the Prometheus text format.
type Metrics interface {
	WriteMetrics(w io.Writer)
}

// Handler returns the API's handler over the task projection.
func Handler(tasks *projections.Tasks, ops Operations, metrics Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		metrics.WriteMetrics(w)
	})
	mux.HandleFunc("POST /api/tasks/{id}/retry", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Step, By string }
		if !decodeBody(w, r, &body) {
			return
		}
		act(w, ops.Retry(r.Context(), r.PathValue("id"), body.Step, operator(r, body.By)))
	})
	mux.HandleFunc("POST /api/tasks/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ By, Reason string }
		if !decodeBody(w, r, &body) {
			return
		}
		act(w, ops.Cancel(r.Context(), r.PathValue("id"), operator(r, body.By), body.Reason))
	})
	mux.HandleFunc("GET /api/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
		t, ok := tasks.Get(r.PathValue("id"))
		if !ok {
			writeError(w, http.StatusNotFound, "no task "+strconv.Quote(r.PathValue("id")))
			return
		}
		writeJSON(w, http.StatusOK, t)
	})
	mux.HandleFunc("GET /api/tasks", func(w http.ResponseWriter, r *http.Request) {
		var state domain.TaskState
		if s := r.URL.Query().Get("state"); s != "" {
			var ok bool
			if state, ok = domain.ParseTaskState(s); !ok {
				writeError(w, http.StatusBadRequest, "unknown state "+strconv.Quote(s)+"; one of Pending, Processing, Processed, Error, Compensating, Compensated")
				return
			}
		}
		limit := 1000
		if l := r.URL.Query().Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil || n < 1 {
				writeError(w, http.StatusBadRequest, "limit must be a positive number")
				return
			}
			limit = n
		}
		list := tasks.List(state, limit)
		writeJSON(w, http.StatusOK, map[string]any{"tasks": list, "count": len(list), "counts": tasks.Counts()})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-tasks.Ready():
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		default:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "catching up"})
		}
	})
	return mux
}

// operator names who acts: the body's "by", else the X-Saga-Operator
// header, else the client's address.
func operator(r *http.Request, by string) string {
	if by != "" {
		return by
	}
	if h := r.Header.Get("X-Saga-Operator"); h != "" {
		return h
	}
	return "api@" + r.RemoteAddr
}

func decodeBody(w http.ResponseWriter, r *http.Request, into any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		writeError(w, http.StatusBadRequest, "read body: "+err.Error())
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return true
	}
	if err := json.Unmarshal(body, into); err != nil {
		writeError(w, http.StatusBadRequest, "body is not valid JSON: "+err.Error())
		return false
	}
	return true
}

func act(w http.ResponseWriter, err error) {
	switch {
	case err == nil:
		writeJSON(w, http.StatusAccepted, map[string]string{"status": "accepted"})
	case errors.Is(err, domain.ErrTaskNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, domain.ErrNotAllowed), errors.Is(err, domain.ErrUnknownStep):
		writeError(w, http.StatusConflict, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
