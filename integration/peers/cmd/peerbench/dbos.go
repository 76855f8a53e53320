package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
)

// dbosEngine runs the saga as a DBOS Transact workflow in this process,
// checkpointed in a throwaway PostgreSQL cluster on loopback.
type dbosEngine struct {
	pg    *child
	ctx   dbos.DBOSContext
	svc   *service
	pgVer string
}

func (e *dbosEngine) Version() string {
	return "DBOS Transact Go v0.12.0, PostgreSQL " + e.pgVer
}

func (e *dbosEngine) Durability() string {
	return "PostgreSQL fsync=on, synchronous_commit=on, wal_sync_method=fdatasync (defaults): every step's checkpoint committed to disk"
}

func (e *dbosEngine) Procs() []int {
	if e.pg == nil {
		return nil
	}
	return []int{e.pg.Pid()}
}

// pgBinDir finds initdb and postgres: --pg-bin, else the newest Debian install.
func pgBinDir(flagDir string) (string, error) {
	if flagDir != "" {
		return flagDir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL under /usr/lib/postgresql (apt-get install postgresql)")
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// asPostgresUser makes cmd run as the postgres (or nobody) user when peerbench
// runs as root: PostgreSQL refuses to run as root.
func asPostgresUser(cmd *exec.Cmd, dir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	var u *user.User
	var err error
	for _, name := range []string{"postgres", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("running as root and no postgres or nobody user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return nil
}

func (e *dbosEngine) Start(ctx context.Context, env *env) error {
	e.svc = env.service
	bin, err := pgBinDir(env.cfg.pgBin)
	if err != nil {
		return err
	}
	e.pgVer = filepath.Base(filepath.Dir(bin))
	data := filepath.Join(env.dir, "pgdata")
	sock := filepath.Join(env.dir, "pgsock")
	for _, d := range []string{data, sock} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C")
	if err := asPostgresUser(initdb, env.dir); err != nil {
		return err
	}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	// Durability settings are PostgreSQL's defaults, spelled out.
	pg := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", sock, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on",
		"-c", "max_connections=300")
	if err := asPostgresUser(pg, env.dir); err != nil {
		return err
	}
	if e.pg, err = startChild("postgres", env.dir, pg); err != nil {
		return err
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := waitFor(ctx, e.pg, 30*time.Second, "postgres", func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	}); err != nil {
		return err
	}
	e.ctx, err = dbos.NewDBOSContext(ctx, dbos.Config{AppName: "peerbench", DatabaseURL: url,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	dbos.RegisterWorkflow(e.ctx, e.saga, dbos.WithWorkflowName("saga"))
	return dbos.Launch(e.ctx)
}

// saga runs the steps in order; on a failure it compensates the steps done,
// in reverse, each compensation a step of its own.
func (e *dbosEngine) saga(ctx dbos.DBOSContext, id string) (string, error) {
	for i := 1; i <= Steps; i++ {
		step := i
		_, err := dbos.RunAsStep(ctx, func(c context.Context) (string, error) {
			return "", e.svc.Call(c, id, step, false)
		}, dbos.WithStepName(fmt.Sprintf("step-%d", step)), dbos.WithStepMaxRetries(2))
		if err != nil {
			for j := step - 1; j >= 1; j-- {
				undo := j
				if _, cerr := dbos.RunAsStep(ctx, func(c context.Context) (string, error) {
					return "", e.svc.Call(c, id, undo, true)
				}, dbos.WithStepName(fmt.Sprintf("undo-%d", undo)), dbos.WithStepMaxRetries(4)); cerr != nil {
					return "", cerr
				}
			}
			return "compensated", err
		}
	}
	return "processed", nil
}

func (e *dbosEngine) Run(ctx context.Context, id string) error {
	h, err := dbos.RunWorkflow(e.ctx, e.saga, id, dbos.WithWorkflowID(id))
	if err != nil {
		return err
	}
	_, err = h.GetResult()
	return err
}

func (e *dbosEngine) Close() {
	if e.ctx != nil {
		dbos.Shutdown(e.ctx, 5*time.Second)
	}
	e.pg.Stop(10 * time.Second)
}
