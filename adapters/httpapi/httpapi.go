// Package httpapi serves saga's HTTP API: the current state of tasks from the
// task projection.
//
//	GET /api/tasks/{id}        one task, 404 if unknown
//	GET /api/tasks?state=S     tasks in state S (all when omitted), &limit=N
//	GET /healthz               200 once the projection has caught up
package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections"
)

// DefaultListen is the API's default address.
const DefaultListen = "127.0.0.1:8080"

// Handler returns the API's handler over the task projection.
func Handler(tasks *projections.Tasks) http.Handler {
	mux := http.NewServeMux()
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
