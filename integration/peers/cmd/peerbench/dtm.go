package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/dtm-labs/dtm/client/dtmcli"
)

// dtmEngine runs the saga as a DTM SAGA of 3 branches with compensations,
// submitted with dtmcli and waited for (WaitResult); the DTM server calls the
// service's step URLs itself.
type dtmEngine struct {
	srv    *child
	server string
	svc    *service
}

func (e *dtmEngine) Version() string { return "DTM v1.19.0, BoltDB store, dtmcli v1.19.0" }

func (e *dtmEngine) Durability() string {
	return "BoltDB store (DTM's default): bbolt fsyncs every commit (NoSync=false); the saga and each branch's status are committed synchronously with BoltDB"
}

func (e *dtmEngine) Procs() []int {
	if e.srv == nil {
		return nil
	}
	return []int{e.srv.Pid()}
}

func (e *dtmEngine) Start(ctx context.Context, env *env) error {
	e.svc = env.service
	bin, err := binary(env.cfg.bin, "dtm")
	if err != nil {
		return err
	}
	dir := filepath.Join(env.dir, "dtm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// DTM listens on every interface: the run script runs it in a
	// loopback-only network namespace. Its BoltDB file is ./dtm.bolt.
	conf := `Store:
  Driver: 'boltdb'
LogLevel: 'warn'
HttpPort: 36789
GrpcPort: 36790
JsonRpcPort: 36791
`
	if err := os.WriteFile(filepath.Join(dir, "conf.yml"), []byte(conf), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(bin, "-c", filepath.Join(dir, "conf.yml"))
	cmd.Dir = dir
	if e.srv, err = startChild("dtm", env.dir, cmd); err != nil {
		return err
	}
	e.server = "http://127.0.0.1:36789/api/dtmsvr"
	if err := waitFor(ctx, e.srv, 30*time.Second, "dtm", httpReady(e.server+"/newGid")); err != nil {
		return err
	}
	// dtmcli's HTTP client: keep a connection per saga in flight.
	dtmcli.GetRestyClient().SetTransport(httpClient(env.cfg.concurrency).Transport)
	return nil
}

func (e *dtmEngine) Run(ctx context.Context, id string) error {
	saga := dtmcli.NewSagaWithContext(ctx, e.server, id)
	for i := 1; i <= Steps; i++ {
		saga.Add(e.svc.stepURL(i, false), e.svc.stepURL(i, true), map[string]any{"order": id, "step": i})
	}
	saga.WaitResult = true // Submit returns once the saga has ended
	return saga.Submit()
}

func (e *dtmEngine) Close() { e.srv.Stop(10 * time.Second) }
