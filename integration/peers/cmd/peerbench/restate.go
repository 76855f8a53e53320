package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	restate "github.com/restatedev/sdk-go"
	"github.com/restatedev/sdk-go/server"
)

// restateEngine runs the saga as a Restate service handler served by this
// process, invoked through a restate-server's HTTP ingress.
type restateEngine struct {
	srv     *child
	cancel  context.CancelFunc
	ingress string
	client  *http.Client
}

func (e *restateEngine) Version() string {
	return "restate-server 1.7.12 (npm), Go SDK v1.2.0"
}

func (e *restateEngine) Durability() string {
	return "restate-server defaults: replicated loglet, replication 1, log-server RocksDB WAL fsync on (rocksdb-disable-wal-fsync=false); each step's result is in the fsynced log before the handler continues"
}

func (e *restateEngine) Procs() []int {
	if e.srv == nil {
		return nil
	}
	return []int{e.srv.Pid()}
}

// Saga is the Restate service: Run is the saga, each step a restate.Run.
type Saga struct{ svc *service }

func (s Saga) Run(ctx restate.Context, id string) (string, error) {
	for i := 1; i <= Steps; i++ {
		step := i
		_, err := restate.Run(ctx, func(rc restate.RunContext) (restate.Void, error) {
			return restate.Void{}, s.svc.Call(rc, id, step, false)
		}, restate.WithName(fmt.Sprintf("step-%d", step)), restate.WithMaxRetryAttempts(3))
		if err != nil {
			for j := step - 1; j >= 1; j-- {
				undo := j
				if _, cerr := restate.Run(ctx, func(rc restate.RunContext) (restate.Void, error) {
					return restate.Void{}, s.svc.Call(rc, id, undo, true)
				}, restate.WithName(fmt.Sprintf("undo-%d", undo))); cerr != nil {
					return "", cerr
				}
			}
			return "", restate.TerminalErrorf("compensated after step %d: %v", step, err)
		}
	}
	return "processed", nil
}

func (e *restateEngine) Start(ctx context.Context, env *env) error {
	bin, err := binary(env.cfg.bin, "restate-server")
	if err != nil {
		return err
	}
	// The ingress (8080), admin (9070) and node (5122) ports are Restate's
	// defaults: run inside the run script's network namespace, where they are free.
	cmd := exec.Command(bin, "--base-dir", filepath.Join(env.dir, "restate"), "--node-name", "peerbench",
		"--bind-ip", "127.0.0.1", "--listen-mode", "tcp", "--no-logo")
	cmd.Env = append(cmd.Environ(), "RESTATE_DISABLE_TELEMETRY=true", "RESTATE_LOG_FILTER=warn", "DO_NOT_TRACK=1")
	if e.srv, err = startChild("restate-server", env.dir, cmd); err != nil {
		return err
	}
	admin := "http://127.0.0.1:9070"
	e.ingress = "http://127.0.0.1:8080"
	if err := waitFor(ctx, e.srv, 60*time.Second, "restate admin", httpReady(admin+"/health")); err != nil {
		return err
	}
	if err := waitFor(ctx, e.srv, 60*time.Second, "restate ingress", httpReady(e.ingress+"/restate/health")); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	rs := server.NewRestate().WithLogger(slog.NewTextHandler(io.Discard, nil), true).Bind(restate.Reflect(Saga{svc: env.service}))
	addr := "127.0.0.1:" + strconv.Itoa(port)
	go func() { _ = rs.Start(sctx, addr) }()
	body := fmt.Sprintf(`{"uri":"http://%s"}`, addr)
	if err := waitFor(ctx, e.srv, 30*time.Second, "deployment registration", func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, admin+"/deployments", bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
		}
		return nil
	}); err != nil {
		return err
	}
	e.client = httpClient(env.cfg.concurrency)
	// The ingress may take a moment to learn the new service.
	return waitFor(ctx, e.srv, 30*time.Second, "first saga", func(ctx context.Context) error { return e.Run(ctx, "ready-check") })
}

func (e *restateEngine) Run(ctx context.Context, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.ingress+"/Saga/Run", bytes.NewBufferString(strconv.Quote(id)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	return nil
}

func (e *restateEngine) Close() {
	if e.cancel != nil {
		e.cancel()
	}
	e.srv.Stop(20 * time.Second)
}
