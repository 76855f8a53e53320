package httpagent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cockroachdb/errors"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/processes"
	"github.com/sagaengine/saga/processes/agentruntime"
)

// Headers the agent sends with every request.
const (
	// IdempotencyKeyHeader carries the command's idempotency key
	// (<taskId>/<step>), the same for every attempt.
	IdempotencyKeyHeader = "Idempotency-Key"
	// ActionHeader says whether a call executes a step or compensates one:
	// protocol.ActionExecute or protocol.ActionCompensate.
	ActionHeader = "Saga-Action"
	// TraceParentHeader carries the W3C trace context of the call: its
	// client span, a child of the agent's span of the command (the
	// command's own traceparent when tracing is off).
	TraceParentHeader = "traceparent"
)

// ErrNoBaseURL is returned (as a permanent failure) for a command without
// an HTTP call when the Handler has no BaseURL to send it to.
var ErrNoBaseURL = errors.New("step has no http call and the agent has no base URL")

// ErrResponseTooLarge is returned (as a transient failure) when a service
// answers with a body over Config.MaxResponseBytes.
var ErrResponseTooLarge = errors.New("response over the limit")

// Config configures a Handler. The zero value works for steps that declare
// an HTTP call.
type Config struct {
	// Client makes the calls. Default: a client with MaxIdleConnsPerHost
	// 256 and no timeout of its own, since each call's context carries the
	// command's deadline.
	Client *http.Client
	// BaseURL is where commands without an HTTP call go: a POST to
	// {BaseURL}/{action}. Empty refuses such commands.
	BaseURL string
	// BreakerOpenFor is how long a host's circuit breaker stays open;
	// default 2s.
	BreakerOpenFor time.Duration
	// Clock tells the time to the breakers and to Retry-After dates;
	// default time.Now.
	Clock func() time.Time
	// MaxResponseBytes bounds a response body; default
	// domain.MaxResultBytes. A larger answer is a transient failure.
	MaxResponseBytes int
	// MaxRenderedBytes bounds what a step's templates render to, URL,
	// headers and body together; default domain.DefaultMaxRenderedBytes.
	// A step whose rendering would be larger fails for good.
	MaxRenderedBytes int
	// TracerProvider starts a client span for every call, whose context
	// the call carries in its traceparent header; default the global
	// TracerProvider.
	TracerProvider trace.TracerProvider
	// HealthByTarget makes the handler judge each host's health itself
	// (with agentruntime.Agent.HealthByTarget): a host whose calls hang, or
	// whose breaker is open, is refused with a agentruntime.CircuitOpenError
	// naming it, while calls to other hosts go on. Without it the agent
	// judges the instance as a whole (BreakerState).
	HealthByTarget bool
	// HangAfter is, with HealthByTarget, a host's latency budget: once its
	// oldest call in flight has run longer, and no call to it was answered
	// meanwhile, its calls hang: refused for BreakerOpenFor, then one
	// trial call goes through, whose answer ends the hang. Default
	// agentruntime.DefaultHangAfter.
	HangAfter time.Duration
	// Secrets resolves {{secret.NAME}} at call time; default the
	// environment alone (Secrets{}).
	Secrets *Secrets
	// Egress, when set, is where the default client may connect (see
	// NewClient); a given Client connects as its transport says. Nil
	// allows any address.
	Egress *Egress
}

// Defaults of Config.
const (
	DefaultBreakerOpenFor = 2 * time.Second
	// maxBreakers bounds the per-host breakers kept; URLs are templates, so
	// hosts come from data.
	maxBreakers = 4096
	// maxErrorBody bounds the part of an answer quoted in an error.
	maxErrorBody = 512
	// MaxRedirects bounds the redirects a call that follows them takes.
	MaxRedirects = 10
)

// Handler is the built-in HTTP agent's step handler. It is safe for
// concurrent use.
type Handler struct {
	cfg    Config
	tracer trace.Tracer

	mu       sync.Mutex
	breakers map[string]*agentruntime.Breaker
	// hosts are the hosts with calls in flight or hanging, with
	// HealthByTarget.
	hosts map[string]*hostCalls
}

// New returns a Handler with cfg's defaults filled in.
func New(cfg Config) *Handler {
	if cfg.Client == nil {
		cfg.Client = NewClient(cfg.Egress)
	}
	// A copy, so that a caller's client keeps its own redirect policy.
	client := *cfg.Client
	client.CheckRedirect = checkRedirect
	cfg.Client = &client
	if cfg.BreakerOpenFor <= 0 {
		cfg.BreakerOpenFor = DefaultBreakerOpenFor
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Secrets == nil {
		cfg.Secrets = &Secrets{}
	}
	if cfg.HangAfter <= 0 {
		cfg.HangAfter = agentruntime.DefaultHangAfter
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = domain.MaxResultBytes
	}
	if cfg.MaxRenderedBytes <= 0 {
		cfg.MaxRenderedBytes = domain.DefaultMaxRenderedBytes
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.TracerProvider == nil {
		cfg.TracerProvider = otel.GetTracerProvider()
	}
	return &Handler{cfg: cfg, tracer: cfg.TracerProvider.Tracer(TracerName), breakers: map[string]*agentruntime.Breaker{}, hosts: map[string]*hostCalls{}}
}

// DefaultClient returns a client with keep-alive connections, up to 256
// idle per host, no timeout of its own and no egress policy:
// NewClient(nil).
func DefaultClient() *http.Client { return NewClient(nil) }

// redirectsKey is the context key of whether a call follows redirects.
type redirectsKey struct{}

// checkRedirect is the Handler's redirect policy: a redirect is followed
// only when the call's step allows it (HTTPCall.FollowRedirects), only to
// the host (and port) it first called, from http to https at most, and at
// most MaxRedirects times. A redirect not followed is the answer: a 3xx,
// which fails the step for good unless the step classifies it otherwise.
// Every connection, a redirect's too, passes the egress policy.
func checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0]
	if follow, _ := first.Context().Value(redirectsKey{}).(bool); !follow {
		return http.ErrUseLastResponse
	}
	switch {
	case len(via) > MaxRedirects:
		return errors.Wrapf(ErrRedirectRefused, "more than %d redirects", MaxRedirects)
	case !sameHost(first.URL, req.URL):
		return errors.Wrapf(ErrRedirectRefused, "to %s, another host than %s", req.URL.Host, first.URL.Host)
	case first.URL.Scheme == "https" && req.URL.Scheme != "https":
		return errors.Wrapf(ErrRedirectRefused, "from https to %s", req.URL.Scheme)
	}
	return nil
}

// sameHost reports whether b names the host and port of a, the default
// port of the scheme counting as written.
func sameHost(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if u.Scheme == "https" {
			return "443"
		}
		return "80"
	}
	if !strings.EqualFold(a.Hostname(), b.Hostname()) {
		return false
	}
	// From http to https on the default ports is the same host upgraded.
	return port(a) == port(b) || (a.Scheme == "http" && b.Scheme == "https" && port(a) == "80" && port(b) == "443")
}

// Class is how an answer is treated.
type Class int

// The classes.
const (
	// Succeeded answers complete the step.
	Succeeded Class = iota + 1
	// Transient answers are retried.
	Transient
	// Permanent answers fail the step for good.
	Permanent
)

// Classify decides how an answer with the given status code is treated:
// 2xx succeed; 408, 429 and 5xx are transient; anything else is permanent.
// The call's TransientStatus and then PermanentStatus lists, when they
// hold the status, win over these rules. (Network errors and timeouts,
// which have no status, are transient.)
func Classify(status int, call *domain.HTTPCall) Class {
	if call != nil {
		if slices.Contains(call.TransientStatus, status) {
			return Transient
		}
		if slices.Contains(call.PermanentStatus, status) {
			return Permanent
		}
	}
	switch {
	case status >= 200 && status < 300:
		return Succeeded
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests, status >= 500:
		return Transient
	}
	return Permanent
}

// StatusError is a failure answer from a service.
type StatusError struct {
	// Target is the method and URL called, without the query.
	Target string
	Status int
	// Body is the start of the answer, at most 512 bytes.
	Body string
}

func (e *StatusError) Error() string {
	s := e.Target + " answered " + strconv.Itoa(e.Status)
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

// RetryAfterError is a transient failure whose answer (429 or 503) said,
// in a Retry-After header, how long to wait before trying again.
// agentruntime.Agent honours it through the RetryAfter method.
type RetryAfterError struct {
	Wait time.Duration
	Err  error
}

func (e *RetryAfterError) Error() string {
	return e.Err.Error() + " (retry after " + e.Wait.String() + ")"
}

// Unwrap returns the failure.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns how long the service asked the caller to wait.
func (e *RetryAfterError) RetryAfter() time.Duration { return e.Wait }

// Handle carries out one command: it implements agentruntime.StepHandler.
// Template errors, invalid headers and permanent answers are returned as
// agentruntime.Permanent failures; any other error is transient.
func (h *Handler) Handle(ctx context.Context, cmd protocol.ExecuteStep) (_ json.RawMessage, err error) {
	secrets := &secretsUsed{lookup: h.cfg.Secrets.Lookup}
	req, call, err := h.request(ctx, cmd, secrets)
	if err != nil {
		return nil, secrets.redactError(err)
	}
	host := req.URL.Host
	// The host's hangs first: a breaker lets its trial call through only
	// to a call that is then made.
	var hc *hostCall
	if h.cfg.HealthByTarget {
		var refused error
		if hc, refused = h.callStarted(host); refused != nil {
			return nil, refused
		}
	}
	breaker := h.breaker(host)
	if err := breaker.Allow(); err != nil {
		var open *agentruntime.CircuitOpenError
		if h.cfg.HealthByTarget && errors.As(err, &open) {
			open.Target = host
		}
		if hc != nil {
			h.callDropped(host, hc)
		}
		return nil, errors.Wrapf(err, "host %s", host)
	}
	if hc != nil {
		defer func() { h.callEnded(host, hc, err, ctx.Err() == nil) }()
	}
	ctx, span := h.tracer.Start(ctx, req.Method, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("http.request.method", req.Method), attribute.String("server.address", req.URL.Hostname()),
			attribute.String("url.full", req.URL.Scheme+"://"+req.URL.Host+req.URL.EscapedPath()),
			processes.AttrTaskID.String(cmd.TaskID), processes.AttrStep.String(cmd.Step), processes.AttrAction.String(cmd.Action))
	}
	defer span.End()
	req = req.WithContext(context.WithValue(ctx, redirectsKey{}, call != nil && call.FollowRedirects))
	// The call's own span when tracing is on; the span the handler runs
	// in, or the command's traceparent (set by request), when it is off.
	traceContext.Inject(ctx, propagation.HeaderCarrier(req.Header))
	result, err := h.do(req, call)
	// What the service says goes into events, logs and traces: never the
	// secrets sent to it.
	result, err = secrets.redactJSON(result), secrets.redactError(err)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	breaker.Record(err)
	return result, err
}

// TracerName names the tracer of the HTTP agent's client spans.
const TracerName = "github.com/sagaengine/saga/adapters/httpagent"

// traceContext writes W3C trace context into a call's headers.
var traceContext = propagation.TraceContext{}

// request builds the request of a command.
func (h *Handler) request(ctx context.Context, cmd protocol.ExecuteStep, secrets *secretsUsed) (*http.Request, *domain.HTTPCall, error) {
	call := cmd.HTTP
	var method, target string
	var headers http.Header
	var body []byte
	what := "step " + cmd.Step
	if cmd.Action == protocol.ActionCompensate {
		what = "compensation of step " + cmd.Step
	}
	if call != nil {
		// One renderer for the whole call: the order is decoded once, and
		// URL, headers and body share one size bound.
		render := domain.NewRenderer(cmd.TemplateData(), h.cfg.MaxRenderedBytes)
		method = strings.ToUpper(call.Method)
		if method == "" {
			method = http.MethodPost
		}
		var err error
		// Secrets go in headers and bodies only (the definition was
		// checked so; this holds for any command).
		if target, err = render.Text(call.URL, domain.EscapeURLValue); err != nil {
			return nil, nil, agentruntime.Permanent(errors.Wrapf(err, "%s: render url", what))
		}
		render.ResolveSecrets(secrets.resolve)
		headers = http.Header{}
		for name, tmpl := range call.Headers {
			if !validHeaderName(name) {
				return nil, nil, agentruntime.Permanent(errors.Newf("%s: header name %q is not valid", what, name))
			}
			value, err := render.Text(tmpl, nil)
			if err != nil {
				return nil, nil, agentruntime.Permanent(errors.Wrapf(err, "%s: render header %s", what, name))
			}
			if strings.ContainsAny(value, "\r\n") {
				return nil, nil, agentruntime.Permanent(errors.Newf("%s: header %s would contain a line break (CR or LF); refused", what, name))
			}
			if !validHeaderValue(value) {
				return nil, nil, agentruntime.Permanent(errors.Newf("%s: header %s would contain a control character; refused", what, name))
			}
			headers.Set(name, value)
		}
		switch {
		case len(call.Body) > 0:
			if body, err = render.JSON(call.Body); err != nil {
				return nil, nil, agentruntime.Permanent(errors.Wrapf(err, "%s: render body", what))
			}
		case method != http.MethodGet && method != http.MethodDelete:
			if body, err = DefaultBody(cmd); err != nil {
				return nil, nil, agentruntime.Permanent(err)
			}
		}
	} else {
		if h.cfg.BaseURL == "" {
			return nil, nil, agentruntime.Permanent(errors.Wrap(ErrNoBaseURL, what))
		}
		action := cmd.Step
		if cmd.Action == protocol.ActionCompensate {
			action = cmd.Compensation
			if action == "" {
				action = "undo-" + cmd.Step
			}
		}
		method, target = http.MethodPost, h.cfg.BaseURL+"/"+url.PathEscape(action)
		var err error
		if body, err = DefaultBody(cmd); err != nil {
			return nil, nil, agentruntime.Permanent(err)
		}
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, agentruntime.Permanent(errors.Newf("%s: %q is not an http or https URL", what, truncate(target, 200)))
	}
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), reader)
	if err != nil {
		return nil, nil, agentruntime.Permanent(errors.Wrapf(err, "%s: build request", what))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for name, values := range headers {
		if name == "Host" {
			req.Host = values[0]
			continue
		}
		req.Header[name] = values
	}
	req.Header.Set(IdempotencyKeyHeader, cmd.IdempotencyKey)
	action := cmd.Action
	if action == "" {
		action = protocol.ActionExecute
	}
	req.Header.Set(ActionHeader, action)
	if cmd.TraceParent != "" {
		req.Header.Set(TraceParentHeader, cmd.TraceParent)
	}
	return req, call, nil
}

// DefaultBody is the JSON body sent when a call gives none: the command's
// taskId, workflow, workflowVersion, step, action, attempt, idempotencyKey,
// order, results and result, leaving out the empty ones.
func DefaultBody(cmd protocol.ExecuteStep) ([]byte, error) {
	size := 256 + len(cmd.Order) + len(cmd.Result)
	for step, result := range cmd.Results {
		size += len(step) + len(result) + 4
	}
	body, err := protocol.AppendHTTPCommandBody(make([]byte, 0, size), cmd)
	return body, errors.Wrapf(err, "encode the default body of %s/%s", cmd.TaskID, cmd.Step)
}

// do sends the request and classifies the outcome.
func (h *Handler) do(req *http.Request, call *domain.HTTPCall) (json.RawMessage, error) {
	target := req.Method + " " + req.URL.Scheme + "://" + req.URL.Host + req.URL.EscapedPath()
	resp, err := h.cfg.Client.Do(req)
	if err != nil {
		// url.Error quotes the whole URL, query included; name the target
		// without it, since the text is stored in events.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		err = errors.Wrapf(err, "%s", target)
		if errors.Is(err, ErrEgressRefused) || errors.Is(err, ErrRedirectRefused) {
			// Trying again would be refused again.
			return nil, agentruntime.Permanent(err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	trace.SpanFromContext(req.Context()).SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	limit := h.cfg.MaxResponseBytes
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	class := Classify(resp.StatusCode, call)
	if class == Succeeded {
		switch {
		case err != nil:
			return nil, errors.Wrapf(err, "%s: read answer", target)
		case len(body) > limit:
			return nil, errors.Wrapf(ErrResponseTooLarge, "%s answered %d with over %d bytes", target, resp.StatusCode, limit)
		}
		var compact bytes.Buffer
		if len(bytes.TrimSpace(body)) == 0 || json.Compact(&compact, body) != nil {
			return nil, nil
		}
		return compact.Bytes(), nil
	}
	failure := error(&StatusError{Target: target, Status: resp.StatusCode, Body: truncate(strings.TrimSpace(string(body)), maxErrorBody)})
	if class == Permanent {
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			failure = errors.Wrap(failure, "redirect not followed (the step does not set followRedirects)")
		}
		return nil, agentruntime.Permanent(failure)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if wait, ok := retryAfter(resp.Header.Get("Retry-After"), h.cfg.Clock()); ok {
			return nil, &RetryAfterError{Wait: wait, Err: failure}
		}
	}
	return nil, failure
}

// retryAfter parses a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(value string, now time.Time) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(value, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, int64(24*time.Hour/time.Second))) * time.Second, true
	}
	at, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}

// breaker returns the circuit breaker of a host.
func (h *Handler) breaker(host string) *agentruntime.Breaker {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.breakers[host]
	if ok {
		return b
	}
	if len(h.breakers) >= maxBreakers {
		for k, other := range h.breakers {
			if !other.IsOpen() {
				delete(h.breakers, k)
			}
		}
	}
	b = agentruntime.NewBreaker(h.cfg.BreakerOpenFor, processes.ClockFunc(h.cfg.Clock))
	h.breakers[host] = b
	return b
}

// BreakerOpen reports whether the circuit breaker of host (host[:port], as
// in a URL) is refusing calls now.
func (h *Handler) BreakerOpen(host string) bool {
	h.mu.Lock()
	b, ok := h.breakers[host]
	h.mu.Unlock()
	return ok && b.IsOpen()
}

// validHeaderName reports whether name is an HTTP token (RFC 9110).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether value has no control characters but tab.
func validHeaderValue(value string) bool {
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// truncate cuts s to at most n bytes on a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

var _ agentruntime.StepHandler = (*Handler)(nil).Handle

// AnyBreakerOpen reports whether the breaker of any host refuses calls now.
func (h *Handler) AnyBreakerOpen() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range h.breakers {
		if b.IsOpen() {
			return true
		}
	}
	return false
}

// BreakerState reports the breakers of the hosts it calls as one, for the
// agent's health: open while a host's breaker refuses calls (Cause names
// the host and the failure that opened it), in trial while one lets a
// trial call through.
func (h *Handler) BreakerState() agentruntime.BreakerState {
	h.mu.Lock()
	defer h.mu.Unlock()
	// The first host in order of those open (else in trial), so that the
	// same one is named every time.
	var out agentruntime.BreakerState
	var named string
	for host, b := range h.breakers {
		s := b.State()
		switch {
		case s.Open && (!out.Open || host < named):
			out, named = agentruntime.BreakerState{Open: true, Cause: "host " + host + ": " + s.Cause}, host
		case s.Trial && !out.Open && (!out.Trial || host < named):
			out, named = agentruntime.BreakerState{Trial: true, Cause: "host " + host + ": " + s.Cause}, host
		}
	}
	return out
}

// BreakersOpened counts how often the breakers of the hosts it knows
// opened.
func (h *Handler) BreakersOpened() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n int64
	for _, b := range h.breakers {
		n += b.Opened()
	}
	return n
}
