package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
)

// service is the no-op HTTP service each step calls, as sagabench's demo
// services: it answers every POST at once. Its replies also satisfy DTM,
// which reads a 200 without "FAILURE" in the body as success.
type service struct {
	URL    string // e.g. http://127.0.0.1:41234
	srv    *http.Server
	calls  atomic.Int64
	client *http.Client
}

var okBody = []byte(`{"dtm_result":"SUCCESS"}`)

func startService(conns int) (*service, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &service{URL: "http://" + ln.Addr().String(), client: httpClient(conns)}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(okBody)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *service) Close() { _ = s.srv.Close() }

// stepURL is the service's address for a step (1-based) or its compensation.
func (s *service) stepURL(step int, undo bool) string {
	if undo {
		return fmt.Sprintf("%s/undo-%d", s.URL, step)
	}
	return fmt.Sprintf("%s/step-%d", s.URL, step)
}

// Call makes a step's POST from a worker (DBOS, Restate, Temporal; DTM calls
// the service itself). The idempotency key is the saga and step, as saga's
// agents send.
func (s *service) Call(ctx context.Context, id string, step int, undo bool) error {
	body := fmt.Sprintf(`{"order":%q,"step":%d}`, id, step)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.stepURL(step, undo), bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("%s/%d", id, step))
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("step %d: HTTP %d", step, resp.StatusCode)
	}
	return nil
}
