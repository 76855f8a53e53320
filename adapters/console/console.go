package console

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/adapters/topics"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/projections"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Tasks is the task view the console lists and shows.
type Tasks interface {
	Get(ctx context.Context, id string) (*protocol.TaskView, bool, error)
	List(ctx context.Context, q projections.TaskQuery) (projections.TaskPage, error)
}

// History reads a task's events from the event store.
type History interface {
	ReadStream(ctx context.Context, stream string) ([]domain.RecordedEvent, error)
}

// Config is what the console shows and who may see it.
type Config struct {
	Tasks   Tasks
	History History
	// Tokens are the API's; nil or empty when authentication is off.
	Tokens *httpapi.Tokens
	// Kafka reads saga.deadletter for the dead letters page; nil leaves
	// the page saying it has no Kafka.
	Kafka topics.Open
	// Metrics are the process's metrics for the overview (nil: none);
	// while Context lasts, they are sampled every few seconds to show the
	// last minutes.
	Metrics prometheus.Gatherer
	Context context.Context
	// PageSize is how many tasks a page lists; default 50.
	PageSize int
	// Agents is the view of agents for the agents page; nil leaves the
	// page saying this process has none.
	Agents httpapi.Agents
}

// deadLetterLimit is how many dead letters the page shows, newest first.
const deadLetterLimit = 100

// Pattern is where Handler is mounted in the API's ServeMux.
const Pattern = "/ui/"

// sessionMaxAge bounds how long a browser keeps the token cookie.
const sessionMaxAge = 12 * time.Hour

// Handler serves the console under /ui/. Mount it behind the API's guard
// (httpapi.Mount), which checks the session cookie the login sets.
func Handler(cfg Config) http.Handler {
	if cfg.PageSize <= 0 {
		cfg.PageSize = 50
	}
	pages := template.Must(template.New("").Funcs(template.FuncMap{
		"ago":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") },
		"ms":    func(d time.Duration) time.Duration { return d.Round(time.Millisecond) },
		"num":   func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) },
		"rate":  func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
		"lower": func(s any) string { return strings.ToLower(fmt.Sprint(s)) },
		"bands": bands,
	}).ParseFS(templateFiles, "templates/*.html"))
	c := &console{cfg: cfg, pages: pages}
	if cfg.Metrics != nil {
		c.samples = &sampler{gather: cfg.Metrics, now: time.Now}
		if cfg.Context != nil {
			go c.samples.run(cfg.Context)
		}
	}
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", cacheFor(http.FileServerFS(static))))
	mux.HandleFunc("GET /ui/{$}", c.tasks)
	mux.HandleFunc("GET /ui/tasks/{id}", c.task)
	mux.HandleFunc("GET /ui/deadletters", c.deadLetters)
	mux.HandleFunc("GET /ui/overview", c.overview)
	mux.HandleFunc("GET /ui/agents", c.agents)
	mux.HandleFunc("GET /ui/login", c.loginForm)
	mux.HandleFunc("POST /ui/login", c.login)
	mux.HandleFunc("POST /ui/logout", c.logout)
	return secureHeaders(mux)
}

type console struct {
	cfg     Config
	pages   *template.Template
	samples *sampler
}

// page is what every template gets.
type page struct {
	Title    string
	Identity string
	Auth     bool
	CSRF     string
	Data     any
}

func (c *console) render(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	p := page{Title: title, Auth: c.cfg.Tokens.Enabled(), Data: data}
	p.Identity, _ = httpapi.Identity(r)
	if ck, err := r.Cookie(httpapi.SessionCookie); err == nil && p.Auth {
		p.CSRF = httpapi.CSRFToken(ck.Value)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := c.pages.ExecuteTemplate(w, name, p); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// taskList is the tasks page's data.
type taskList struct {
	States     []domain.TaskState
	State      string
	Priorities []domain.Priority
	Priority   string
	Workflow   string
	Since      string
	Until      string
	Tasks      []*protocol.TaskView
	Next       string
	// APIQuery is the query of GET /api/tasks that the script polls.
	APIQuery string
	Error    string
}

// formTime is how a datetime-local field sends a time; the console reads
// it as UTC, which the page says.
const formTime = "2006-01-02T15:04"

func (c *console) tasks(w http.ResponseWriter, r *http.Request) {
	in := r.URL.Query()
	d := taskList{States: []domain.TaskState{domain.StatePending, domain.StateProcessing, domain.StateProcessed, domain.StateError, domain.StateCompensating, domain.StateCompensated},
		State: in.Get("state"), Workflow: in.Get("workflow"), Since: in.Get("since"), Until: in.Get("until"),
		Priorities: domain.Priorities(), Priority: in.Get("priority")}
	q := projections.TaskQuery{Workflow: d.Workflow, Limit: c.cfg.PageSize, Cursor: in.Get("cursor")}
	api := url.Values{"limit": {strconv.Itoa(c.cfg.PageSize)}}
	if d.Workflow != "" {
		api.Set("workflow", d.Workflow)
	}
	if q.Cursor != "" {
		api.Set("cursor", q.Cursor)
	}
	var problems []string
	if d.State != "" {
		var ok bool
		if q.State, ok = domain.ParseTaskState(d.State); ok {
			api.Set("state", d.State)
		} else {
			problems = append(problems, "unknown state "+strconv.Quote(d.State))
		}
	}
	if d.Priority != "" {
		if p, err := domain.ParsePriority(d.Priority); err == nil {
			q.Priority = p
			api.Set("priority", string(p))
		} else {
			problems = append(problems, "unknown priority "+strconv.Quote(d.Priority))
		}
	}
	for name, into := range map[string]*time.Time{"since": &q.Since, "until": &q.Until} {
		if s := in.Get(name); s != "" {
			t, err := time.Parse(formTime, s)
			if err != nil {
				if t, err = time.Parse(time.RFC3339, s); err != nil {
					problems = append(problems, name+" is not a time such as 2026-11-22T10:00")
					continue
				}
			}
			*into = t.UTC()
			api.Set(name, into.Format(time.RFC3339))
		}
	}
	d.APIQuery = api.Encode()
	if len(problems) > 0 {
		d.Error = strings.Join(problems, "; ")
		w.WriteHeader(http.StatusBadRequest)
		c.render(w, r, "tasks.html", "Tasks", d)
		return
	}
	res, err := c.cfg.Tasks.List(r.Context(), q)
	if err != nil {
		d.Error = err.Error()
		w.WriteHeader(http.StatusBadRequest)
	}
	d.Tasks = res.Tasks
	if res.NextCursor != "" {
		next := url.Values{}
		for k, v := range in {
			next[k] = v
		}
		next.Set("cursor", res.NextCursor)
		d.Next = "?" + next.Encode()
	}
	c.render(w, r, "tasks.html", "Tasks", d)
}

// eventRow is one event in the task page's history table.
type eventRow struct {
	projections.AuditRow
	ID       string
	Position uint64
	Metadata domain.EventMetadata
	Data     string
}

// taskPage is the task page's data.
type taskPage struct {
	Task      *protocol.TaskView
	Timeline  template.HTML
	Events    []eventRow
	CanRetry  bool
	CanCancel bool
	Error     string
}

func (c *console) task(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	view, found, err := c.cfg.Tasks.Get(r.Context(), id)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if !found {
		w.WriteHeader(http.StatusNotFound)
		c.render(w, r, "notfound.html", "Task not found", id)
		return
	}
	d := taskPage{Task: view, CanRetry: view.State == domain.StateError, CanCancel: !view.State.Terminal()}
	recorded, err := c.cfg.History.ReadStream(r.Context(), domain.TaskStream(id))
	if err == nil {
		var audit *projections.Audit
		if audit, err = projections.BuildAudit(id, recorded, projections.Cut{}); err == nil {
			d.Timeline = BuildTimeline(audit.Rows).SVG()
			for i, row := range audit.Rows {
				rec := recorded[i]
				d.Events = append(d.Events, eventRow{AuditRow: row, ID: rec.ID, Position: rec.Position, Metadata: rec.Metadata, Data: indent(rec.Data)})
			}
		}
	}
	switch {
	case errors.Is(err, domain.ErrTaskExpired) || errors.Is(err, domain.ErrTaskNotFound) && view.State.Terminal():
		// The view keeps the row of a task whose events expired.
		d.Error = "the event history has expired: the task finished longer ago than its workflow's retention of finished tasks"
	case err != nil:
		d.Error = "the event history cannot be read: " + err.Error()
	}
	c.render(w, r, "task.html", "Task "+id, d)
}

func indent(data []byte) string {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return string(data)
	}
	out, _ := json.MarshalIndent(v, "", "  ")
	return string(out)
}

// letterRow is a dead letter as the page shows it.
type letterRow struct {
	*topics.DeadLetter
	Preview string
}

type letterPage struct {
	Letters []letterRow
	Limit   int
	Error   string
}

// deadLetters reads the tail of saga.deadletter without a consumer group on
// each view, within ten seconds, and shows the newest deadLetterLimit.
func (c *console) deadLetters(w http.ResponseWriter, r *http.Request) {
	d := letterPage{Limit: deadLetterLimit}
	if c.cfg.Kafka == nil {
		d.Error = "This process has no Kafka to read dead letters from."
	} else {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		letters, err := topics.ReadNewestDeadLetters(ctx, c.cfg.Kafka, deadLetterLimit)
		if err != nil {
			d.Error = "saga.deadletter cannot be read: " + err.Error()
		}
		for _, l := range letters {
			d.Letters = append(d.Letters, letterRow{DeadLetter: l, Preview: topics.Preview(l.Record.Value, 200)})
		}
	}
	c.render(w, r, "deadletters.html", "Dead letters", d)
}

func (c *console) loginForm(w http.ResponseWriter, r *http.Request) {
	if !c.cfg.Tokens.Enabled() {
		http.Redirect(w, r, Pattern, http.StatusSeeOther)
		return
	}
	c.render(w, r, "login.html", "Sign in", loginData{Next: safeNext(r.URL.Query().Get("next"))})
}

type loginData struct {
	Next  string
	Error string
}

// login checks the token a form sends and, when it is known, sets it as an
// HttpOnly, SameSite=Strict cookie (Secure over TLS) that the guard reads.
func (c *console) login(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	secret := strings.TrimSpace(r.PostForm.Get("token"))
	if _, ok := c.cfg.Tokens.Identify(secret); !ok {
		w.WriteHeader(http.StatusUnauthorized)
		c.render(w, r, "login.html", "Sign in", loginData{Next: next, Error: "This token is not known."})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: httpapi.SessionCookie, Value: secret, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: int(sessionMaxAge / time.Second)})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout forgets the cookie. It needs the CSRF header like every action
// with the cookie, so the page's script sends it.
func (c *console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: httpapi.SessionCookie, Value: "", Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	w.WriteHeader(http.StatusNoContent)
}

// safeNext keeps a redirect target inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Pattern) || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return Pattern
	}
	return next
}

func cacheFor(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// secureHeaders forbids every source but sagad itself, framing included.
func secureHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}
