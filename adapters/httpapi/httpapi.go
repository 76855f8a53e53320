// Package httpapi serves saga's HTTP API: the current state of tasks from the
// task projection.
//
//	GET  /api/tasks/{id}          one task (a protocol.TaskView), 404 if unknown
//	GET  /api/tasks               a page of tasks (a protocol.TaskList: summaries without
//	                              results, at most projections.DefaultPageBytes of them),
//	                              newest first: ?state=S, &workflow=W,
//	                              &priority=high|normal|low,
//	                              &step=S (tasks at that step), &reason=R (a substring),
//	                              &since=T, &until=T (RFC 3339), &limit=N (100; at most
//	                              1000), &cursor= the nextCursor of the page before;
//	                              any other parameter is refused (400)
//	POST /api/admin/task-view/rebuild  rebuild the task view from the store while it serves
//	GET  /api/admin/task-view     whether a rebuild runs; how the last one went
//	POST /api/tasks/{id}/retry    {"step": "...", "by": "..."}: retry a task in Error
//	POST /api/tasks/{id}/cancel   {"by": "...", "reason": "..."}: cancel (compensate) a task
//	GET  /api/workflows           the newest version of every workflow
//	GET  /api/workflows/{name}    one workflow: ?version=N, newest when omitted
//	GET  /api/workflows/{name}/versions  every version, oldest first
//	POST /api/workflows           register a definition (JSON document);
//	                              ?dryRun=true runs every check registering
//	                              would, and registers nothing
//	GET  /api/agents              every agent with its instances, totals and
//	                              queued commands (a protocol.AgentList; AgentsAPI)
//	GET  /api/agents/{name}       one agent (a protocol.AgentView), 404 if unknown
//	GET  /healthz                 liveness: 200 while the process serves
//	                              (and the projection has caught up)
//	GET  /readyz                  readiness: 200 when every check passes, else
//	                              503; each check named in the answer
//	GET  /metrics                 metrics in the Prometheus text format
//	                              (a process without the API serves only
//	                              these three: Operational)
//	/ui/...                       the web console (adapters/console), mounted
//	                              by the caller behind the same guard
//
// The actions answer 202 once the request is recorded; the task's state
// follows as the scheduler carries it out. The tasks' JSON is
// protocol.TaskView, described in docs/api.md and docs/task.schema.json.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/projections"
)

// DefaultListen is the API's default address.
const DefaultListen = "127.0.0.1:8080"

// Operations are the operators' actions on tasks.
type Operations interface {
	Retry(ctx context.Context, taskID, step, by string) error
	Cancel(ctx context.Context, taskID, by, reason string) error
}

// Workflows registers and reads workflow definitions.
type Workflows interface {
	Apply(ctx context.Context, w *domain.Workflow, by string) (*domain.Workflow, bool, error)
	// Check runs every check Apply runs, registering nothing.
	Check(ctx context.Context, w *domain.Workflow) (*domain.Workflow, error)
	Workflow(ctx context.Context, name string, version int) (*domain.Workflow, error)
	Versions(ctx context.Context, name string) ([]*domain.Workflow, error)
	List(ctx context.Context) ([]*domain.Workflow, error)
}

// WorkflowView is a registered workflow as the API shows it.
type WorkflowView struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	// Definition is the JSON document, every default spelled out.
	Definition json.RawMessage `json:"definition"`
}

// ViewOf returns the API's view of a workflow.
func ViewOf(w *domain.Workflow) (WorkflowView, error) {
	def, err := w.MarshalDefinition()
	return WorkflowView{Name: w.Name, Version: w.Version, Definition: def}, err
}

// maxWorkflowBytes bounds a definition sent to the API.
const maxWorkflowBytes = 1 << 20

// Metrics writes the process's metrics in the Prometheus text format.
type Metrics interface {
	WriteMetrics(w io.Writer)
}

// Check is the answer of one readiness check.
type Check struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Readiness runs the readiness checks of the process.
type Readiness interface {
	Readiness(ctx context.Context) []Check
}

// MaxListLimit caps the limit of GET /api/tasks.
const MaxListLimit = projections.MaxPageSize

// Tasks is the task view the API serves.
type Tasks interface {
	Get(ctx context.Context, id string) (*protocol.TaskView, bool, error)
	List(ctx context.Context, q projections.TaskQuery) (projections.TaskPage, error)
	Counts(ctx context.Context) (map[domain.TaskState]int, error)
	// Ready is closed once the view has caught up with the store.
	Ready() <-chan struct{}
}

// Rebuilder is a task view that can be rebuilt from the event store while
// it serves: POST /api/admin/task-view/rebuild starts it, GET
// /api/admin/task-view tells how it goes.
type Rebuilder interface {
	Rebuild(ctx context.Context) error
	// RebuildStatus reports whether a rebuild runs and how the last went.
	RebuildStatus() (running bool, last any)
}

// pageBuffers keeps the buffers of pages of tasks between requests: a page
// of 1,000 tasks is about 1 MB, copied once out of the view and once into
// the answer, and fresh memory for each (the Go heap growing, then the
// kernel's pages faulted in) made the first pages after a start the
// slowest.
var pageBuffers = bufferPool{max: 16 << 20}

// bufferPool is a sync.Pool of byte buffers that drops those grown past max.
type bufferPool struct {
	pool sync.Pool
	max  int
}

func (p *bufferPool) get() *[]byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return b
	}
	return new([]byte)
}

func (p *bufferPool) put(b *[]byte) {
	if cap(*b) <= p.max {
		p.pool.Put(b)
	}
}

// rawTaskList is protocol.TaskList with the tasks as the view stores them.
type rawTaskList struct {
	Tasks      []json.RawMessage        `json:"tasks"`
	Count      int                      `json:"count"`
	NextCursor string                   `json:"nextCursor,omitempty"`
	Counts     map[domain.TaskState]int `json:"counts"`
}

// writeTaskList writes a page with its rows as they are. encoding/json would
// scan and compact every row again, which was half the cost of a page of
// 1,000 tasks; the rows are JSON the view encoded itself (and
// TestServedTasksMatchTheSchema checks what is served).
func writeTaskList(w http.ResponseWriter, l rawTaskList) {
	size := 64
	for _, row := range l.Tasks {
		size += len(row) + 1
	}
	answer := pageBuffers.get()
	defer pageBuffers.put(answer)
	b := bytes.NewBuffer((*answer)[:0])
	b.Grow(size)
	defer func() { *answer = b.Bytes()[:0] }()
	b.WriteString(`{"tasks":[`)
	for i, row := range l.Tasks {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(row)
	}
	b.WriteString(`],"count":`)
	b.WriteString(strconv.Itoa(l.Count))
	if l.NextCursor != "" {
		cursor, _ := json.Marshal(l.NextCursor)
		b.WriteString(`,"nextCursor":`)
		b.Write(cursor)
	}
	counts, _ := json.Marshal(l.Counts)
	b.WriteString(`,"counts":`)
	b.Write(counts)
	b.WriteString("}\n")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	_, _ = w.Write(b.Bytes())
}

// Config is what the API's handler serves and how it guards it. Tasks,
// Metrics and Readiness are required; a caller that does not serve the
// others (a test) may leave them empty.
type Config struct {
	// Tasks is the task view GET /api/tasks and /healthz read; a Tasks that
	// is also a Rebuilder adds the /api/admin/task-view endpoints.
	Tasks Tasks
	// Operations carries out the operators' retry and cancel.
	Operations Operations
	// Workflows registers and reads the definitions of /api/workflows.
	Workflows Workflows
	// Metrics writes GET /metrics.
	Metrics Metrics
	// Readiness runs the checks of GET /readyz.
	Readiness Readiness
	// Tokens, when enabled, are required of every request but /healthz and
	// /readyz, an operator's to act (see guard); nil for none.
	Tokens *Tokens
	// Hosts are the names the API may be reached by (see AllowedHosts and
	// guard); the zero value allows the default hosts.
	Hosts AllowedHosts
	// Mounts add handlers behind the same guard (the console at /ui/).
	Mounts []Mount
}

// Handler returns the API's handler over the task view, guarded by the
// config's tokens and hosts.
func Handler(cfg Config) http.Handler {
	mux := http.NewServeMux()
	for _, m := range cfg.Mounts {
		mux.Handle(m.Pattern, m.Handler)
	}
	handleOperational(mux, cfg)
	handleWorkflows(mux, cfg.Workflows)
	mux.HandleFunc("POST /api/tasks/{id}/retry", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Step, By string }
		if !decodeBody(w, r, &body) {
			return
		}
		act(w, cfg.Operations.Retry(r.Context(), r.PathValue("id"), body.Step, operator(r, body.By)))
	})
	mux.HandleFunc("POST /api/tasks/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ By, Reason string }
		if !decodeBody(w, r, &body) {
			return
		}
		act(w, cfg.Operations.Cancel(r.Context(), r.PathValue("id"), operator(r, body.By), body.Reason))
	})
	if rb, ok := cfg.Tasks.(Rebuilder); ok {
		mux.HandleFunc("POST /api/admin/task-view/rebuild", func(w http.ResponseWriter, r *http.Request) {
			if err := rb.Rebuild(context.WithoutCancel(r.Context())); err != nil {
				writeError(w, http.StatusConflict, err.Error())
				return
			}
			writeJSON(w, http.StatusAccepted, map[string]string{"status": "rebuilding"})
		})
		mux.HandleFunc("GET /api/admin/task-view", func(w http.ResponseWriter, r *http.Request) {
			running, last := rb.RebuildStatus()
			writeJSON(w, http.StatusOK, map[string]any{"rebuilding": running, "lastRebuild": last})
		})
	}
	mux.HandleFunc("GET /api/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
		t, ok, err := cfg.Tasks.Get(r.Context(), r.PathValue("id"))
		switch {
		case err != nil:
			writeError(w, http.StatusInternalServerError, err.Error())
		case !ok:
			writeError(w, http.StatusNotFound, "no task "+strconv.Quote(r.PathValue("id")))
		default:
			writeJSON(w, http.StatusOK, t)
		}
	})
	mux.HandleFunc("GET /api/tasks", func(w http.ResponseWriter, r *http.Request) {
		q, err := taskQuery(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		q.Raw = true // the rows are passed on as stored: no decoding, no re-encoding
		rowsBuf := pageBuffers.get()
		defer pageBuffers.put(rowsBuf)
		q.RawBuffer = *rowsBuf
		page, err := cfg.Tasks.List(r.Context(), q)
		*rowsBuf = page.RawBuffer[:0]
		if errors.Is(err, projections.ErrBadCursor) {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		counts, err := cfg.Tasks.Counts(r.Context())
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		rows := page.Raw
		if rows == nil {
			rows = []json.RawMessage{}
			for _, t := range page.Tasks { // a view that cannot give raw rows
				raw, _ := json.Marshal(t)
				rows = append(rows, raw)
			}
		}
		writeTaskList(w, rawTaskList{Tasks: rows, Count: len(rows), NextCursor: page.NextCursor, Counts: counts})
	})
	return guard(cfg.Tokens, cfg.Hosts, mux)
}

// Guard is how a handler is guarded: the tokens it requires (nil for
// none) and the hosts it may be reached by.
type Guard struct {
	Tokens *Tokens
	Hosts  AllowedHosts
}

// Operational returns the handler of a process without the API: only
// GET /healthz (200 while the process serves), /readyz and /metrics,
// under the same guard as Handler's (tokens for /metrics, none for the
// probes; the allowed hosts). It needs Metrics and Readiness; Tasks, when
// set, makes /healthz wait for the view as Handler's does.
func Operational(cfg Config) http.Handler {
	mux := http.NewServeMux()
	handleOperational(mux, cfg)
	return guard(cfg.Tokens, cfg.Hosts, mux)
}

// handleOperational serves /healthz, /readyz and /metrics.
func handleOperational(mux *http.ServeMux, cfg Config) {
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		checks := cfg.Readiness.Readiness(r.Context())
		code, status := http.StatusOK, "ready"
		for _, c := range checks {
			if !c.OK {
				code, status = http.StatusServiceUnavailable, "not ready"
			}
		}
		writeJSON(w, code, map[string]any{"status": status, "checks": checks})
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		cfg.Metrics.WriteMetrics(w)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Tasks != nil {
			select {
			case <-cfg.Tasks.Ready():
			default:
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "catching up"})
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

// Mount is a handler served under the API's guard at a ServeMux pattern.
type Mount struct {
	Pattern string
	Handler http.Handler
}

// Identity is who the request's token belongs to, when tokens are on.
func Identity(r *http.Request) (string, bool) { return identity(r) }

// operator names who acts: with tokens on, the token's identity, whatever
// the request says; else the body's "by", the X-Saga-Operator header, or
// the client's address.
func operator(r *http.Request, by string) string {
	if id, ok := identity(r); ok {
		return id
	}
	if by != "" {
		return by
	}
	if h := r.Header.Get("X-Saga-Operator"); h != "" {
		return h
	}
	return "api@" + r.RemoteAddr
}

// maxActionBytes bounds the body of an operator's action.
const maxActionBytes = 64 << 10

func decodeBody(w http.ResponseWriter, r *http.Request, into any) bool {
	body, ok := readBody(w, r, maxActionBytes)
	if !ok {
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

// readBody reads a request body of at most limit bytes; a larger one is
// refused with 413 rather than cut.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "body is over the limit of "+strconv.FormatInt(limit, 10)+" bytes")
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, "read body: "+err.Error())
		return nil, false
	}
	return body, true
}

func handleWorkflows(mux *http.ServeMux, workflows Workflows) {
	mux.HandleFunc("GET /api/workflows", func(w http.ResponseWriter, r *http.Request) {
		list, err := workflows.List(r.Context())
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeWorkflows(w, list)
	})
	mux.HandleFunc("GET /api/workflows/{name}", func(w http.ResponseWriter, r *http.Request) {
		version := 0
		if v := r.URL.Query().Get("version"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				writeError(w, http.StatusBadRequest, "version must be a whole number from 1")
				return
			}
			version = n
		}
		wf, err := workflows.Workflow(r.Context(), r.PathValue("name"), version)
		if err != nil {
			writeWorkflowError(w, err)
			return
		}
		view, err := ViewOf(wf)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, view)
	})
	mux.HandleFunc("GET /api/workflows/{name}/versions", func(w http.ResponseWriter, r *http.Request) {
		versions, err := workflows.Versions(r.Context(), r.PathValue("name"))
		if err != nil {
			writeWorkflowError(w, err)
			return
		}
		writeWorkflows(w, versions)
	})
	mux.HandleFunc("POST /api/workflows", func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r, maxWorkflowBytes)
		if !ok {
			return
		}
		wf, err := domain.ParseDefinition(body)
		if err != nil {
			writeWorkflowError(w, err)
			return
		}
		if r.URL.Query().Get("dryRun") == "true" {
			if _, err := workflows.Check(r.Context(), wf); err != nil {
				writeWorkflowError(w, namedSource(err, wf.Name))
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"name": wf.Name, "valid": true})
			return
		}
		registered, changed, err := workflows.Apply(r.Context(), wf, operator(r, ""))
		if err != nil {
			writeWorkflowError(w, namedSource(err, wf.Name))
			return
		}
		status := http.StatusOK
		if changed {
			status = http.StatusCreated
		}
		writeJSON(w, status, map[string]any{"name": registered.Name, "version": registered.Version, "changed": changed})
	})
}

func writeWorkflows(w http.ResponseWriter, list []*domain.Workflow) {
	views := make([]WorkflowView, 0, len(list))
	for _, wf := range list {
		view, err := ViewOf(wf)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		views = append(views, view)
	}
	writeJSON(w, http.StatusOK, map[string]any{"workflows": views})
}

// namedSource names the workflow as the source of a definition error
// that names none, so that the refusal says which definition it is about.
func namedSource(err error, name string) error {
	var de *domain.DefinitionError
	if errors.As(err, &de) && de.Source == "" {
		de.Source = "workflow " + name
	}
	return err
}

func writeWorkflowError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, domain.ErrUnknownWorkflow):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, domain.ErrInvalidWorkflow):
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": err.Error(), "problems": domain.ProblemsOf(err)})
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// taskParams are the parameters of GET /api/tasks. Any other is refused:
// a misspelt filter must not widen a list that a bulk action follows.
var taskParams = []string{"state", "workflow", "priority", "step", "reason", "since", "until", "limit", "cursor"}

// taskQuery reads GET /api/tasks's parameters: state, workflow, step (the
// tasks at that step), reason (a substring), since and until (RFC 3339
// submission times), limit (default 100, capped at 1000) and cursor.
func taskQuery(r *http.Request) (projections.TaskQuery, error) {
	params := r.URL.Query()
	for name := range params {
		if !slices.Contains(taskParams, name) {
			return projections.TaskQuery{}, errors.New("unknown parameter " + strconv.Quote(name) + "; the filters are " + strings.Join(taskParams, ", "))
		}
	}
	q := projections.TaskQuery{Workflow: params.Get("workflow"), Step: params.Get("step"), Reason: params.Get("reason"), Cursor: params.Get("cursor")}
	if len(q.Step) > projections.MaxFilterLength || len(q.Reason) > projections.MaxFilterLength {
		return q, errors.New("step and reason are at most " + strconv.Itoa(projections.MaxFilterLength) + " bytes")
	}
	if s := params.Get("state"); s != "" {
		var ok bool
		if q.State, ok = domain.ParseTaskState(s); !ok {
			return q, errors.New("unknown state " + strconv.Quote(s) + "; one of Pending, Processing, Processed, Error, Compensating, Compensated")
		}
	}
	if p := params.Get("priority"); p != "" {
		var err error
		if q.Priority, err = domain.ParsePriority(p); err != nil {
			return q, err
		}
	}
	for name, into := range map[string]*time.Time{"since": &q.Since, "until": &q.Until} {
		if s := params.Get(name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return q, errors.New(name + " must be an RFC 3339 time such as 2026-11-22T10:00:00Z")
			}
			*into = t
		}
	}
	if l := params.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			return q, errors.New("limit must be a positive number")
		}
		q.Limit = min(n, MaxListLimit)
	}
	return q, nil
}
