// Package demo provides the demo workflow (order.json) and its remote
// services (inventory, payment, shipping) as small HTTP servers on
// loopback; saga's built-in HTTP agent calls them ({url}/{action}).
//
// A service honours the Idempotency-Key header: a repeated key returns the
// first answer and has no second effect, for as long as the service keeps
// the key (KeyRetention, 24 hours by default, as payment providers do). Faults can be injected per service:
// transient (503), permanent (422) or hang (no answer until the caller gives
// up), each at a rate.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package demo

import (
	_ "embed"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/httpagent"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

//go:embed order.json
var orderDefinition []byte

// Workflow returns the demo workflow, read from its definition file
// (order.json beside this package): reserve stock, take payment, book
// shipping, each undone by its compensation.
func Workflow() *domain.Workflow {
	w, err := domain.ParseDefinition(orderDefinition)
	if err != nil {
		panic("the demo workflow's definition is invalid: " + err.Error())
	}
	return w
}

// FaultMode is the kind of failure a service injects.
type FaultMode string

// The fault modes.
const (
	FaultNone      FaultMode = ""
	FaultTransient FaultMode = "transient"
	FaultPermanent FaultMode = "permanent"
	FaultHang      FaultMode = "hang"
)

// Fault is a failure injected into a share (Rate, 0 to 1) of the calls of
// a service's step actions, or of its compensations.
type Fault struct {
	Mode         FaultMode
	Rate         float64
	Compensation bool
}

// compensationSuffix marks a fault for compensations in a fault spec.
const compensationSuffix = ".compensation"

// ParseFault parses AGENT=MODE[:RATE] (faults in the agent's step actions)
// or AGENT.compensation=MODE[:RATE] (faults in its compensations), e.g.
// payment=hang or inventory=transient:0.2. The rate defaults to 1.
func ParseFault(spec string) (agent string, f Fault, err error) {
	agent, rest, ok := strings.Cut(spec, "=")
	if !ok || agent == "" {
		return "", f, errors.Newf("fault %q: want AGENT=MODE[:RATE] or AGENT%s=MODE[:RATE]", spec, compensationSuffix)
	}
	if a, isComp := strings.CutSuffix(agent, compensationSuffix); isComp {
		agent, f.Compensation = a, true
	}
	mode, rateText, hasRate := strings.Cut(rest, ":")
	f.Mode, f.Rate = FaultMode(mode), 1
	switch f.Mode {
	case FaultTransient, FaultPermanent, FaultHang:
	default:
		return "", f, errors.Newf("fault %q: mode must be transient, permanent or hang", spec)
	}
	if hasRate {
		if f.Rate, err = strconv.ParseFloat(rateText, 64); err != nil || f.Rate < 0 || f.Rate > 1 {
			return "", f, errors.Newf("fault %q: rate must be a number from 0 to 1", spec)
		}
	}
	return agent, f, nil
}

// Service is one demo remote service.
type Service struct {
	Name   string
	Logger *slog.Logger
	// Latency is added to every call that is not hung, and a random part
	// of Jitter on top, as real services vary.
	Latency, Jitter time.Duration

	// KeyRetention is how long the service keeps an idempotency key and
	// its answer; a key repeated later takes effect again, as at a real
	// service. Zero means DefaultKeyRetention. Set it before the first call.
	KeyRetention time.Duration

	mu     sync.Mutex
	faults []Fault
	// keys are the idempotency keys kept (action/key), with the time of
	// their first call, from which their answer is made again; keyOrder is
	// the same keys oldest first, so expired ones go from its front.
	keys     map[string]time.Time
	keyOrder []string

	calls atomic.Int64
	srv   *http.Server
	lis   net.Listener

	// load counts the calls in progress, their peak, and when each began
	// (the last maxStarts), so that tests can check capacity and rate
	// limits from the service's side.
	load struct {
		sync.Mutex
		now, peak int
		starts    []time.Time
	}
}

// maxStarts bounds the call start times a service remembers.
const maxStarts = 1 << 16

// DefaultKeyRetention is how long a service keeps an idempotency key by
// default.
const DefaultKeyRetention = 24 * time.Hour

// NewService returns a service with no faults.
func NewService(name string, logger *slog.Logger) *Service {
	return &Service{Name: name, Logger: logger, keys: map[string]time.Time{}}
}

// SetFaults replaces the injected faults; none removes them. For each call
// the faults are drawn in order, each at its rate, so transient:0.2 and
// hang:0.05 fail a quarter of the calls.
func (s *Service) SetFaults(faults ...Fault) {
	s.mu.Lock()
	s.faults = append([]Fault(nil), faults...)
	s.mu.Unlock()
}

func (s *Service) drawFault(compensation bool) FaultMode {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := rand.Float64()
	for _, f := range s.faults {
		if f.Compensation != compensation {
			continue
		}
		if r < f.Rate {
			return f.Mode
		}
		r -= f.Rate
	}
	return FaultNone
}

// Start serves on addr (port 0 picks one).
func (s *Service) Start(addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return errors.Wrapf(err, "demo service %s listen", s.Name)
	}
	s.lis = lis
	mux := http.NewServeMux()
	mux.HandleFunc("POST /{action}", s.serveAction)
	mux.HandleFunc("GET /effects", s.serveEffects)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(lis) }()
	return nil
}

// URL is the service's base URL.
func (s *Service) URL() string { return "http://" + s.lis.Addr().String() }

// Close stops the service at once, cutting hung calls off as a crash of
// the remote service would.
func (s *Service) Close() error { return s.srv.Close() }

// Effects returns how often each action/key kept took effect; a correct
// engine never makes one take effect twice. A key kept counts once: a
// repeat within KeyRetention is answered from the first call.
func (s *Service) Effects() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.keys))
	for k := range s.keys {
		out[k] = 1
	}
	return out
}

// KeysKept is how many idempotency keys the service holds now.
func (s *Service) KeysKept() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// forgetExpired drops the keys kept longer than KeyRetention. The caller
// holds mu.
func (s *Service) forgetExpired(now time.Time) {
	retention := s.KeyRetention
	if retention <= 0 {
		retention = DefaultKeyRetention
	}
	n := 0
	for n < len(s.keyOrder) && now.Sub(s.keys[s.keyOrder[n]]) >= retention {
		delete(s.keys, s.keyOrder[n])
		n++
	}
	// Slicing off the front shrinks the capacity too, so the next append
	// that outgrows it copies only the keys kept: the slice stays a small
	// multiple of them.
	s.keyOrder = s.keyOrder[n:]
}

// Calls counts the requests the service received.
func (s *Service) Calls() int64 { return s.calls.Load() }

// PeakConcurrent is the most calls the service was serving at once.
func (s *Service) PeakConcurrent() int {
	s.load.Lock()
	defer s.load.Unlock()
	return s.load.peak
}

// ResetPeak forgets the peak so far, as from now.
func (s *Service) ResetPeak() {
	s.load.Lock()
	defer s.load.Unlock()
	s.load.peak = s.load.now
}

// MostCallsWithin is the most calls that began within any window of
// length d, over the calls the service remembers (the last 65,536).
func (s *Service) MostCallsWithin(d time.Duration) int {
	s.load.Lock()
	defer s.load.Unlock()
	most, first := 0, 0
	for i, at := range s.load.starts {
		for at.Sub(s.load.starts[first]) >= d {
			first++
		}
		most = max(most, i-first+1)
	}
	return most
}

// begin notes a call beginning; the function it returns notes its end.
func (s *Service) begin() func() {
	s.load.Lock()
	s.load.now++
	s.load.peak = max(s.load.peak, s.load.now)
	if len(s.load.starts) == maxStarts {
		s.load.starts = append(s.load.starts[:0], s.load.starts[maxStarts/2:]...)
	}
	s.load.starts = append(s.load.starts, time.Now())
	s.load.Unlock()
	return func() {
		s.load.Lock()
		s.load.now--
		s.load.Unlock()
	}
}

func (s *Service) serveEffects(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.Effects())
}

// actionAnswer is a service's answer to an action. Its fields are in the
// order of their names, as the map it replaced was written (a struct
// encodes without sorting keys).
type actionAnswer struct {
	Action  string    `json:"action"`
	At      time.Time `json:"at"`
	Key     string    `json:"key"`
	Service string    `json:"service"`
}

func (s *Service) serveAction(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	defer s.begin()()
	action := r.PathValue("action")
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		http.Error(w, "Idempotency-Key header is required", http.StatusBadRequest)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	if mode := s.drawFault(r.Header.Get(httpagent.ActionHeader) == protocol.ActionCompensate); mode != FaultNone {
		switch mode {
		case FaultHang:
			<-r.Context().Done()
			return
		case FaultPermanent:
			http.Error(w, s.Name+" refuses "+action+" for good", http.StatusUnprocessableEntity)
			return
		default:
			http.Error(w, s.Name+" is briefly unavailable", http.StatusServiceUnavailable)
			return
		}
	}
	if wait := s.Latency + time.Duration(rand.Int64N(int64(s.Jitter)+1)); wait > 0 {
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
	}
	effectKey := action + "/" + key
	now := time.Now()
	s.mu.Lock()
	s.forgetExpired(now)
	first, replayed := s.keys[effectKey]
	if !replayed {
		first = now
		s.keys[effectKey] = now
		s.keyOrder = append(s.keyOrder, effectKey)
	}
	s.mu.Unlock()
	// The answer is made from the first call's time, so a replay gets the
	// same bytes without the service keeping them.
	answer, _ := json.Marshal(actionAnswer{Action: action, At: first.UTC(), Key: key, Service: s.Name})
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	_, _ = w.Write(answer)
}
