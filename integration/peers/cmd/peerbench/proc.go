package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTicks = 100

type cpuSample struct {
	at    time.Time
	self  float64         // seconds of this process (getrusage)
	procs map[int]float64 // seconds of each engine process
}

// engine is the CPU the engine's processes spent between two samples:
// processes started in between count from zero; those that ended in between
// are not counted.
func (s cpuSample) engine(before cpuSample) float64 {
	var total float64
	for pid, t := range s.procs {
		total += t - before.procs[pid]
	}
	return total
}

func sampleCPU(roots []int) cpuSample {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := cpuSample{at: time.Now(), self: tv(ru.Utime) + tv(ru.Stime), procs: map[int]float64{}}
	for pid, t := range descendants(roots) {
		s.procs[pid] = t
	}
	return s
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// descendants returns the CPU seconds of the roots and all their descendants.
func descendants(roots []int) map[int]float64 {
	type stat struct {
		ppid int
		cpu  float64
	}
	all := map[int]stat{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command may hold spaces and parentheses: fields follow the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		all[pid] = stat{ppid: ppid, cpu: (utime + stime) / clockTicks}
	}
	children := map[int][]int{}
	for pid, s := range all {
		children[s.ppid] = append(children[s.ppid], pid)
	}
	out := map[int]float64{}
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		s, ok := all[pid]
		if !ok {
			continue
		}
		if _, seen := out[pid]; seen {
			continue
		}
		out[pid] = s.cpu
		queue = append(queue, children[pid]...)
	}
	return out
}

// child is an engine process started by peerbench, its output in a log file.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startChild(name, dir string, cmd *exec.Cmd) (*child, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true              // stop the whole group at the end
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL // and never outlive peerbench
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) Pid() int { return c.cmd.Process.Pid }

// exited reports an early exit with the end of the log.
func (c *child) exited() error {
	select {
	case <-c.done:
		return fmt.Errorf("%s exited (%v); end of %s:\n%s", c.name, c.err, c.log, tail(c.log, 2000))
	default:
		return nil
	}
}

// Stop sends SIGTERM to the child's process group, then SIGKILL after grace.
func (c *child) Stop(grace time.Duration) {
	if c == nil {
		return
	}
	pgid := c.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-c.done
	}
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// freePort returns a loopback TCP port free at the time of asking.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitFor polls check until it succeeds, the child exits or the timeout.
func waitFor(ctx context.Context, c *child, timeout time.Duration, what string, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if err := c.exited(); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %s: %v; end of %s:\n%s", what, timeout, last, c.log, tail(c.log, 2000))
}

// httpReady checks that a GET of url answers below 500.
func httpReady(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			return errors.New(resp.Status)
		}
		return nil
	}
}

// binary finds an engine's binary in the bin directory, else on PATH.
func binary(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found in %s or on PATH (run integration/peers/run to install it)", name, dir)
}
