// Command peerbench runs saga's benchmark workload on another durable
// workflow engine: a closed loop of 3-step sagas whose steps each make one
// no-op HTTP POST to a local service, with compensations defined, kept at
// --concurrency in flight for --duration after --warmup. It reports what
// sagabench reports (orders/s, steps/s, latency percentiles) plus the CPU
// spent per saga by this process (client, worker and service, as sagabench's
// single process holds them) and by the engine's own processes, as text and
// as one JSON line.
//
// peerbench starts the engine itself, with its durable defaults, in a fresh
// data directory under --work, and stops it afterwards. DTM and Restate bind
// every interface: run those inside a loopback-only network namespace (the
// run script next to this module does).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Steps is the number of steps of the benchmark saga, as sagabench's default.
const Steps = 3

type config struct {
	engine      string
	concurrency int
	duration    time.Duration
	window      time.Duration
	warmup      time.Duration
	work        string
	bin         string
	pgBin       string
	jsonOut     string
	keep        bool
	temporalDB  string
}

// engine is one workflow engine under test.
type engine interface {
	// Start starts the engine's servers and this process's worker.
	Start(ctx context.Context, env *env) error
	// Run runs one saga to its end and returns its error, if any.
	Run(ctx context.Context, id string) error
	// Procs are the roots of the engine's process trees (their CPU is counted).
	Procs() []int
	// Durability says how the engine persists each step, as configured.
	Durability() string
	// Version names the engine and its client versions.
	Version() string
	// Close stops the engine.
	Close()
}

type env struct {
	cfg     config
	dir     string // fresh data directory of this run
	service *service
}

// Result is what a run measured; the field names follow sagabench's JSON.
type Result struct {
	Engine            string             `json:"engine"`
	Version           string             `json:"version"`
	Durability        string             `json:"durability"`
	Concurrency       int                `json:"concurrency"`
	Steps             int                `json:"steps"`
	Orders            int                `json:"orders"`
	Errors            int                `json:"errors"`
	Seconds           float64            `json:"seconds"`
	OrdersPerSec      float64            `json:"ordersPerSecond"`
	StepsPerSec       float64            `json:"stepsPerSecond"`
	LatencyMillis     map[string]float64 `json:"latencyMillis"`
	CPUSeconds        map[string]float64 `json:"cpuSeconds"`
	CPUMillisPerOrder float64            `json:"cpuMillisPerOrder"`
	CPUPercent        float64            `json:"cpuPercent"`
	CPUs              int                `json:"cpus"`
	// CallsPerOrder is the service's POSTs in the window per saga completed
	// in it: about 3 when every step ran once (a check on the engine's work).
	CallsPerOrder float64 `json:"callsPerOrder"`
	FirstError    string  `json:"firstError,omitempty"`
	// Windows are the figures of each --window of the run, and Steady the
	// first full window beside the last, as in sagabench's JSON.
	Windows []Window `json:"windows"`
	Steady  *Steady  `json:"steady,omitempty"`
}

// Window is one stretch of the measured run.
type Window struct {
	StartSeconds      float64            `json:"startSeconds"`
	EndSeconds        float64            `json:"endSeconds"`
	Orders            int                `json:"orders"`
	OrdersPerSec      float64            `json:"ordersPerSecond"`
	LatencyMillis     map[string]float64 `json:"latencyMillis"`
	CPUMillisPerOrder float64            `json:"cpuMillisPerOrder"`
}

// Steady compares the first and the last full windows.
type Steady struct {
	Window                   string  `json:"window"`
	First                    int     `json:"firstWindow"`
	Last                     int     `json:"lastWindow"`
	ThroughputLastOverFirst  float64 `json:"throughputLastOverFirst"`
	CPUPerOrderLastOverFirst float64 `json:"cpuPerOrderLastOverFirst"`
}

func main() {
	var c config
	flag.StringVar(&c.engine, "engine", "", "engine to measure: dbos, restate, dtm or temporal")
	flag.IntVar(&c.concurrency, "concurrency", 64, "sagas in flight at once")
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "how long to measure")
	flag.DurationVar(&c.warmup, "warmup", 3*time.Second, "how long to run before measuring")
	flag.DurationVar(&c.window, "window", 0, "report figures for every window of this length (default: a minute for runs of two minutes or more, else a quarter of the run)")
	flag.StringVar(&c.work, "work", ".work", "working directory: each run's data directory is made under it")
	flag.StringVar(&c.bin, "bin", "", "directory of the engines' binaries (restate-server, dtm, temporal; default WORK/bin)")
	flag.StringVar(&c.pgBin, "pg-bin", "", "directory of PostgreSQL's initdb and postgres (default: found under /usr/lib/postgresql)")
	flag.StringVar(&c.jsonOut, "json", "", "also write the JSON result to this file")
	flag.BoolVar(&c.keep, "keep", false, "keep the run's data directory")
	flag.StringVar(&c.temporalDB, "temporal-db", "file", "Temporal dev server's store: file (a SQLite file, durable) or memory (the dev server's default, not durable)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: peerbench --engine dbos|restate|dtm|temporal [flags]\n       peerbench table RESULT.json...   (a markdown table of peerbench and sagabench results)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.Arg(0) == "table" {
		if err := table(os.Stdout, flag.Args()[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "peerbench:", err)
			os.Exit(1)
		}
		return
	}
	if c.bin == "" {
		c.bin = filepath.Join(c.work, "bin")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(1)
	}
}

func newEngine(name string) (engine, error) {
	switch name {
	case "dbos":
		return &dbosEngine{}, nil
	case "restate":
		return &restateEngine{}, nil
	case "dtm":
		return &dtmEngine{}, nil
	case "temporal":
		return &temporalEngine{}, nil
	}
	return nil, fmt.Errorf("unknown engine %q (dbos, restate, dtm, temporal)", name)
}

func run(ctx context.Context, c config) error {
	eng, err := newEngine(c.engine)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.work, 0o755); err != nil {
		return err
	}
	if c.work, err = filepath.Abs(c.work); err != nil {
		return err
	}
	if c.bin, err = filepath.Abs(c.bin); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(c.work, "run-"+c.engine+"-")
	if err != nil {
		return err
	}
	if !c.keep {
		defer os.RemoveAll(dir)
	}
	svc, err := startService(c.concurrency)
	if err != nil {
		return err
	}
	defer svc.Close()
	e := &env{cfg: c, dir: dir, service: svc}
	t0 := time.Now()
	if err := eng.Start(ctx, e); err != nil {
		eng.Close()
		return fmt.Errorf("start %s: %w", c.engine, err)
	}
	defer eng.Close()
	fmt.Fprintf(os.Stderr, "%s started in %.1f s (data in %s); %d in flight, warm-up %s, measuring %s\n",
		c.engine, time.Since(t0).Seconds(), dir, c.concurrency, c.warmup, c.duration)
	res, err := measure(ctx, c, eng, svc)
	if err != nil {
		return err
	}
	res.Engine, res.Version, res.Durability = c.engine, eng.Version(), eng.Durability()
	report(os.Stdout, res)
	b, _ := json.Marshal(res)
	fmt.Fprintf(os.Stdout, "%s\n", b)
	if c.jsonOut != "" {
		return os.WriteFile(c.jsonOut, append(b, '\n'), 0o644)
	}
	return nil
}

// measure keeps c.concurrency sagas in flight; it counts those that start
// after the warm-up and end before the window closes.
func measure(ctx context.Context, c config, eng engine, svc *service) (*Result, error) {
	res := &Result{Concurrency: c.concurrency, Steps: Steps, CPUs: runtime.GOMAXPROCS(0)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		ends      []time.Time // of each latency, for the windows
		errs      int
		firstErr  error
		windowT0  atomic.Int64 // unix nanos; 0 until the warm-up ends
		windowT1  atomic.Int64
		seq       atomic.Int64
		finished  atomic.Int64
	)
	prefix := fmt.Sprintf("pb%x", time.Now().UnixNano())
	var wg sync.WaitGroup
	for w := 0; w < c.concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				id := fmt.Sprintf("%s-%07d", prefix, seq.Add(1))
				start := time.Now()
				err := eng.Run(ctx, id)
				end := time.Now()
				finished.Add(1)
				if ctx.Err() != nil {
					return
				}
				t0, t1 := windowT0.Load(), windowT1.Load()
				if t0 == 0 || start.UnixNano() < t0 || (t1 != 0 && end.UnixNano() > t1) {
					if err != nil && t0 == 0 {
						mu.Lock()
						if firstErr == nil {
							firstErr = fmt.Errorf("saga %s (warm-up): %w", id, err)
						}
						mu.Unlock()
					}
					continue
				}
				mu.Lock()
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = fmt.Errorf("saga %s: %w", id, err)
					}
				} else {
					latencies = append(latencies, end.Sub(start))
					ends = append(ends, end)
				}
				mu.Unlock()
			}
		}()
	}
	stopProgress := progress(&finished)
	defer stopProgress()
	select {
	case <-time.After(c.warmup):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if finished.Load() == 0 {
		fmt.Fprintln(os.Stderr, "no saga finished during the warm-up; measuring anyway")
	}
	cpu0 := sampleCPU(eng.Procs())
	calls0 := svc.calls.Load()
	t0 := time.Now()
	windowT0.Store(t0.UnixNano())
	period := c.window
	if period <= 0 {
		period = c.duration / 4
		if c.duration >= 2*time.Minute {
			period = time.Minute
		}
	}
	cpus := []cpuSample{cpu0} // at each window's end
	deadline := time.After(c.duration)
	ticker := time.NewTicker(period)
	defer ticker.Stop()
measuring:
	for {
		select {
		case <-ticker.C:
			cpus = append(cpus, sampleCPU(eng.Procs()))
		case <-deadline:
			break measuring
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	t1 := time.Now()
	windowT1.Store(t1.UnixNano())
	cpu1 := sampleCPU(eng.Procs())
	calls := svc.calls.Load() - calls0
	cancel()
	waitTimeout(&wg, 10*time.Second)

	mu.Lock()
	defer mu.Unlock()
	elapsed := t1.Sub(t0).Seconds()
	res.Orders, res.Errors, res.Seconds = len(latencies), errs, elapsed
	res.OrdersPerSec = float64(len(latencies)) / elapsed
	res.StepsPerSec = res.OrdersPerSec * Steps
	res.LatencyMillis = percentiles(latencies)
	driver := cpu1.self - cpu0.self
	engineCPU := cpu1.engine(cpu0)
	res.CPUSeconds = map[string]float64{"driver": round3(driver), "engine": round3(engineCPU), "total": round3(driver + engineCPU)}
	if len(latencies) > 0 {
		res.CallsPerOrder = round3(float64(calls) / float64(len(latencies)))
		res.CPUMillisPerOrder = round3((driver + engineCPU) * 1000 / float64(len(latencies)))
	}
	res.CPUPercent = round3((driver + engineCPU) * 100 / elapsed)
	if firstErr != nil {
		res.FirstError = firstErr.Error()
	}
	res.Windows, res.Steady = windows(t0, period, latencies, ends, append(cpus, cpu1))
	for i, w := range res.Windows {
		fmt.Fprintf(os.Stderr, "  window %d [%4.0fs-%4.0fs]: %5.0f sagas/s  p50 %6.1f ms  p99 %6.1f ms  cpu %.2f ms/saga\n",
			i, w.StartSeconds, w.EndSeconds, w.OrdersPerSec, w.LatencyMillis["p50"], w.LatencyMillis["p99"], w.CPUMillisPerOrder)
	}
	if len(latencies) == 0 {
		return res, fmt.Errorf("no saga completed in the window (%d errors): %v", errs, firstErr)
	}
	return res, nil
}

// windows splits the measured sagas by the window they ended in; cpus are
// the samples at the start and at each window's end (the last at the end
// of the run, which may close a shorter window).
func windows(t0 time.Time, period time.Duration, latencies []time.Duration, ends []time.Time, cpus []cpuSample) ([]Window, *Steady) {
	n := len(cpus) - 1
	byWindow := make([][]time.Duration, n)
	for i, end := range ends {
		w := min(int(end.Sub(t0)/period), n-1)
		byWindow[w] = append(byWindow[w], latencies[i])
	}
	var out []Window
	for i := range n {
		start, end := float64(i)*period.Seconds(), float64(i+1)*period.Seconds()
		if i == n-1 {
			end = start + cpus[i+1].at.Sub(cpus[i].at).Seconds()
		}
		w := Window{StartSeconds: start, EndSeconds: end, Orders: len(byWindow[i]), LatencyMillis: percentiles(byWindow[i])}
		if secs := end - start; secs > 0 {
			w.OrdersPerSec = float64(w.Orders) / secs
		}
		if w.Orders > 0 {
			used := cpus[i+1].self - cpus[i].self + cpus[i+1].engine(cpus[i])
			w.CPUMillisPerOrder = round3(used * 1000 / float64(w.Orders))
		}
		out = append(out, w)
	}
	var full []int
	for i, w := range out {
		if w.EndSeconds-w.StartSeconds >= 0.95*period.Seconds() {
			full = append(full, i)
		}
	}
	if len(full) < 2 {
		return out, nil
	}
	first, last := out[full[0]], out[full[len(full)-1]]
	s := &Steady{Window: period.String(), First: full[0], Last: full[len(full)-1]}
	if first.OrdersPerSec > 0 {
		s.ThroughputLastOverFirst = round3(last.OrdersPerSec / first.OrdersPerSec)
	}
	if first.CPUMillisPerOrder > 0 {
		s.CPUPerOrderLastOverFirst = round3(last.CPUMillisPerOrder / first.CPUMillisPerOrder)
	}
	return out, s
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		fmt.Fprintln(os.Stderr, "some sagas still in flight after the window; not waiting for them")
	}
}

func progress(finished *atomic.Int64) func() {
	stop := make(chan struct{})
	go func() {
		start := time.Now()
		ticker := time.NewTicker(time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ticker.C:
				d := finished.Load()
				fmt.Fprintf(os.Stderr, "  %7d sagas finished, %.0f/s\n", d, float64(d)/time.Since(start).Seconds())
			}
		}
	}()
	return func() { close(stop) }
}

func percentiles(lat []time.Duration) map[string]float64 {
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(p float64) float64 {
		if len(s) == 0 {
			return 0
		}
		i := int(p * float64(len(s)-1))
		return float64(s[i].Microseconds()) / 1000
	}
	return map[string]float64{"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "max": at(1)}
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

func report(w io.Writer, r *Result) {
	fmt.Fprintf(w, "%s (%s): concurrency %d, %d steps each, %d CPUs\n", r.Engine, r.Version, r.Concurrency, r.Steps, r.CPUs)
	fmt.Fprintf(w, "  durability: %s\n", r.Durability)
	fmt.Fprintf(w, "  %.1f s: %d sagas, %.0f orders/s, %.0f steps/s, %d errors, %.2f service calls per saga\n", r.Seconds, r.Orders, r.OrdersPerSec, r.StepsPerSec, r.Errors, r.CallsPerOrder)
	fmt.Fprintf(w, "  latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", r.LatencyMillis["p50"], r.LatencyMillis["p90"], r.LatencyMillis["p99"], r.LatencyMillis["max"])
	fmt.Fprintf(w, "  cpu: %.2f ms per saga, %.0f %% of one core (driver %.2f s, engine %.2f s)\n", r.CPUMillisPerOrder, r.CPUPercent, r.CPUSeconds["driver"], r.CPUSeconds["engine"])
	if r.FirstError != "" {
		fmt.Fprintf(w, "  first error: %s\n", r.FirstError)
	}
}

// httpClient is a keep-alive client with room for every saga in flight.
func httpClient(conns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = conns + 16
	t.MaxIdleConnsPerHost = conns + 16
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}
