package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

const temporalQueue = "peerbench"

// temporalEngine runs the saga as a Temporal workflow of 3 activities on
// `temporal server start-dev`, with a worker in this process.
type temporalEngine struct {
	memory bool
	srv    *child
	client client.Client
	worker worker.Worker
}

func (e *temporalEngine) Version() string {
	return "temporal CLI v1.5.1 dev server (Temporal server v1.29.1), Go SDK v1.37.0"
}

func (e *temporalEngine) Durability() string {
	if e.memory {
		return "dev server's default: SQLite in memory, NOT durable (--temporal-db memory)"
	}
	return "dev server on a SQLite file (--db-filename) with SQLite's defaults: rollback journal, synchronous=FULL (fsync at every commit); the dev server's default is in memory, not used here"
}

func (e *temporalEngine) Procs() []int {
	if e.srv == nil {
		return nil
	}
	return []int{e.srv.Pid()}
}

// activities are the saga's steps and compensations, each one POST.
type activities struct{ svc *service }

func (a *activities) Step(ctx context.Context, id string, step int) error {
	return a.svc.Call(ctx, id, step, false)
}

func (a *activities) Undo(ctx context.Context, id string, step int) error {
	return a.svc.Call(ctx, id, step, true)
}

// SagaWorkflow runs the steps in order and compensates the done ones in
// reverse on a failure.
func SagaWorkflow(ctx workflow.Context, id string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaximumAttempts: 3},
	})
	var a *activities
	for i := 1; i <= Steps; i++ {
		if err := workflow.ExecuteActivity(ctx, a.Step, id, i).Get(ctx, nil); err != nil {
			for j := i - 1; j >= 1; j-- {
				if cerr := workflow.ExecuteActivity(ctx, a.Undo, id, j).Get(ctx, nil); cerr != nil {
					return "", cerr
				}
			}
			return "compensated", err
		}
	}
	return "processed", nil
}

func (e *temporalEngine) Start(ctx context.Context, env *env) error {
	bin, err := binary(env.cfg.bin, "temporal")
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	httpPort, err := freePort()
	if err != nil {
		return err
	}
	metricsPort, err := freePort()
	if err != nil {
		return err
	}
	args := []string{"server", "start-dev", "--headless", "--ip", "127.0.0.1",
		"--port", strconv.Itoa(port), "--http-port", strconv.Itoa(httpPort), "--metrics-port", strconv.Itoa(metricsPort), "--log-level", "warn"}
	switch env.cfg.temporalDB {
	case "file":
		args = append(args, "--db-filename", filepath.Join(env.dir, "temporal.db"))
	case "memory":
		e.memory = true
	default:
		return fmt.Errorf("--temporal-db %q: file or memory", env.cfg.temporalDB)
	}
	cmd := exec.Command(bin, args...)
	if e.srv, err = startChild("temporal", env.dir, cmd); err != nil {
		return err
	}
	hostPort := "127.0.0.1:" + strconv.Itoa(port)
	logger := tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := waitFor(ctx, e.srv, 90*time.Second, "temporal frontend", func(ctx context.Context) error {
		c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Namespace: "default", Logger: logger})
		if err != nil {
			return err
		}
		e.client = c
		return nil
	}); err != nil {
		return err
	}
	e.worker = worker.New(e.client, temporalQueue, worker.Options{})
	e.worker.RegisterWorkflow(SagaWorkflow)
	e.worker.RegisterActivity(&activities{svc: env.service})
	if err := e.worker.Start(); err != nil {
		return err
	}
	return waitFor(ctx, e.srv, 30*time.Second, "first workflow", func(ctx context.Context) error {
		return e.Run(ctx, fmt.Sprintf("ready-%d", time.Now().UnixNano()))
	})
}

func (e *temporalEngine) Run(ctx context.Context, id string) error {
	run, err := e.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: temporalQueue}, SagaWorkflow, id)
	if err != nil {
		return err
	}
	return run.Get(ctx, nil)
}

func (e *temporalEngine) Close() {
	if e.worker != nil {
		e.worker.Stop()
	}
	if e.client != nil {
		e.client.Close()
	}
	e.srv.Stop(10 * time.Second)
}
