// Command sagabench measures saga under load: it submits orders at a given
// concurrency or rate, as a caller would (with a private reply topic), for
// a number of orders or a duration, and reports orders/s, steps/s and the
// end-to-end latency from submission to the final status, for the whole
// run and for each window of it (with CPU per order, memory and GC), as
// text, JSON, an SVG histogram and an SVG timeline. A steady-state figure
// is the last full window beside the first; a short run is a burst.
//
// With no --kafka-brokers it starts the whole system in-process on embedded
// servers (fsync on, as sagad runs), with no-op or latency-injected demo
// services and a workflow of --steps steps.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain"
)

type config struct {
	orders, concurrency, steps, warmup int
	rate                               float64
	brokers, data, jsonOut, svgOut     string
	timelineOut, heapDir, cpuDir       string
	latency, duration, window          time.Duration
	demoKeyRetention                   time.Duration
	agentCapacity, partitions          int
	workflow                           string
	kafkaFsync, secure, throughKafka   bool
	storeThroughNetwork                bool
	cpuProfile, syncTopics             string
	compression                        string
	security                           *kafka.Security
	priorities                         priorityMix
}

// Result is what a run measured.
type Result struct {
	Orders       int     `json:"orders"`
	Concurrency  int     `json:"concurrency"`
	Rate         float64 `json:"rate,omitempty"`
	Steps        int     `json:"steps"`
	ServiceDelay string  `json:"serviceLatency"`
	Seconds      float64 `json:"seconds"`
	// Duration is the time orders were submitted for, with --duration.
	Duration      string             `json:"duration,omitempty"`
	OrdersPerSec  float64            `json:"ordersPerSecond"`
	StepsPerSec   float64            `json:"stepsPerSecond"`
	LatencyMillis map[string]float64 `json:"latencyMillis"`
	Outcomes      map[string]int     `json:"outcomes"`
	CPUs          int                `json:"cpus"`
	Embedded      bool               `json:"embedded"`
	KafkaFsync    bool               `json:"kafkaFsync"`
	SyncTopics    string             `json:"kafkaSyncTopics"`
	// KafkaCompression is the embedded engine's --kafka-compression.
	KafkaCompression string `json:"kafkaCompression,omitempty"`
	// Partitions is the embedded engine's --partitions.
	Partitions int `json:"partitions,omitempty"`
	// CommandsThroughKafka says in-process commands were off.
	CommandsThroughKafka bool `json:"commandsThroughKafka"`
	// EventStoreThroughNetwork says the engine's appends and subscription
	// went through gRPC.
	EventStoreThroughNetwork bool `json:"eventStoreThroughNetwork"`
	// CPUSeconds is the CPU this process used while measuring: with the
	// embedded system, the whole system's, client and services included.
	CPUSeconds        float64 `json:"cpuSeconds"`
	CPUMillisPerOrder float64 `json:"cpuMillisPerOrder"`

	// Windows are the run's figures window by window, and Steady the
	// first full window beside the last.
	Windows []Window `json:"windows"`
	Steady  *Steady  `json:"steady,omitempty"`
	// Calibration is the machine's speed before and after the run.
	Calibration *Calibration `json:"calibration,omitempty"`

	latencies *histogram

	// PhaseMillis splits each order's latency at the times the store
	// recorded its first event (TaskSubmitted) and its final one, p50 of
	// each part: "submit" from sending the order to its first event,
	// "engine" between the two, "reply" from the final event to the
	// caller having its status. Embedded only, where one clock times all.
	PhaseMillis map[string]float64 `json:"phaseMillis,omitempty"`

	// LatencyByPriority are the percentiles of each priority's orders,
	// with --priority-mix.
	LatencyByPriority map[domain.Priority]map[string]float64 `json:"latencyByPriority,omitempty"`
}

func main() {
	var c config
	flag.IntVar(&c.orders, "orders", 2000, "orders to submit (unless --duration is given)")
	flag.DurationVar(&c.duration, "duration", 0, "submit orders for this long instead of a number of them, e.g. 10m")
	flag.DurationVar(&c.window, "window", 0, "report figures every window of this length (default 1m with --duration, else 5s)")
	flag.StringVar(&c.timelineOut, "timeline-svg", "", "write the per-window figures over time to this SVG file")
	flag.StringVar(&c.cpuDir, "cpu-profiles", "", "write a CPU profile of every window to this directory, to compare early and late windows (instead of --cpuprofile)")
	flag.StringVar(&c.heapDir, "heap-profiles", "", "write a heap profile at the end of every window to this directory (embedded: the whole system)")
	flag.DurationVar(&c.demoKeyRetention, "demo-key-retention", 5*time.Second, "how long the embedded demo services keep idempotency keys (orders finish within seconds; a real service keeps them for hours)")
	flag.IntVar(&c.concurrency, "concurrency", 64, "orders in flight at once")
	flag.Float64Var(&c.rate, "rate", 0, "submit at this many orders/s instead of keeping --concurrency in flight")
	flag.IntVar(&c.steps, "steps", 3, "steps per order (embedded only)")
	flag.IntVar(&c.warmup, "warmup", 100, "orders run before measuring")
	flag.DurationVar(&c.latency, "service-latency", 0, "latency of each demo service call (embedded only)")
	flag.IntVar(&c.partitions, "partitions", engine.DefaultPartitions, "partitions of the topics the embedded system creates, as sagad's flag (embedded only)")
	flag.IntVar(&c.agentCapacity, "agent-capacity", 0, "calls each demo agent makes at once (embedded only; default sagad's); set it below --concurrency to make the agents the bottleneck, so that steps wait for room in priority order")
	flag.StringVar(&c.brokers, "kafka-brokers", "", "measure a running sagad through these brokers instead of an embedded system")
	flag.StringVar(&c.workflow, "workflow", "", "workflow of the orders (default: bench on embedded, order otherwise)")
	flag.StringVar(&c.data, "data", "", "data directory of the embedded system (default: a new temporary one)")
	flag.StringVar(&c.jsonOut, "json", "", "write the result as JSON to this file")
	flag.StringVar(&c.svgOut, "svg", "", "write a latency histogram to this SVG file")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured run (embedded: the whole system) to this file")
	flag.BoolVar(&c.kafkaFsync, "kafka-fsync", false, "make the embedded Kafka fsync every batch too (the event store always does)")
	flag.BoolVar(&c.throughKafka, "commands-through-kafka", false, "send every command and reply through Kafka, as sagad's flag (embedded only)")
	flag.BoolVar(&c.storeThroughNetwork, "eventstore-through-network", false, "send the engine's appends and subscription to the embedded event store through gRPC rather than in process (embedded only)")
	flag.StringVar(&c.syncTopics, "kafka-sync-topics", strings.Join(broker.DefaultSyncTopics, ","), "topics (or prefix*, !excepted) the embedded Kafka fsyncs before acknowledging, as sagad's flag")
	flag.StringVar(&c.compression, "kafka-compression", engine.KafkaCompressionAuto, "codec the engine's Kafka producers compress with, as sagad's flag: auto is none with the embedded Kafka (embedded only)")
	flag.BoolVar(&c.secure, "secure", false, "run the embedded system in secure mode (TLS and SASL/SCRAM on Kafka, TLS and users on the event store)")
	mix := flag.String("priority-mix", "", "give the orders priorities in these shares, e.g. high=10,normal=60,low=30, and report latency per priority")
	c.security = kafka.RegisterFlags(flag.CommandLine)
	replot := flag.String("replot", "", "draw --timeline-svg again from this result JSON, without running anything")
	flag.Parse()
	if *replot != "" {
		if err := replotResult(*replot, c); err != nil {
			fmt.Fprintln(os.Stderr, "sagabench:", err)
			os.Exit(1)
		}
		return
	}
	if c.window <= 0 {
		c.window = 5 * time.Second
		if c.duration > 0 {
			c.window = time.Minute
		}
	}
	var err error
	if c.priorities, err = parsePriorityMix(*mix); err != nil {
		fmt.Fprintln(os.Stderr, "sagabench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	engine.TuneGC() // the embedded system runs in this process, as in sagad
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "sagabench:", err)
		os.Exit(1)
	}
}

// benchWorkflow has n steps over the demo agents, fast backoff, 10 s budgets.
func benchWorkflow(n int) *domain.Workflow {
	agents := []string{"inventory", "payment", "shipping"}
	wf := &domain.Workflow{Name: "bench"}
	for i := 0; i < n; i++ {
		wf.Steps = append(wf.Steps, domain.StepDefinition{Name: fmt.Sprintf("step-%d", i+1), Agent: agents[i%len(agents)],
			Budget: 10 * time.Second, MaxAttempts: 3, Backoff: domain.DefaultBackoff,
			Compensation: &domain.CompensationDefinition{Action: fmt.Sprintf("undo-%d", i+1), Budget: 10 * time.Second, MaxAttempts: 5, Backoff: domain.DefaultBackoff}})
	}
	return wf
}

func run(ctx context.Context, c config) error {
	res := &Result{Orders: c.orders, Concurrency: c.concurrency, Rate: c.rate, Steps: c.steps, ServiceDelay: c.latency.String(),
		CPUs: runtime.GOMAXPROCS(0), Embedded: c.brokers == "", KafkaFsync: c.kafkaFsync, SyncTopics: c.syncTopics, CommandsThroughKafka: c.throughKafka, EventStoreThroughNetwork: c.storeThroughNetwork, Outcomes: map[string]int{}}
	brokers := kafka.SplitBrokers(c.brokers)
	var embedded *engine.App
	if res.Embedded {
		dir := c.data
		if dir == "" {
			tmp, err := os.MkdirTemp("", "sagabench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			dir = tmp
		}
		a, err := engine.Start(engine.Config{DataDir: dir, KafkaListen: "127.0.0.1:0", EventStoreListen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0",
			DemoAgents: true, Partitions: int32(c.partitions), AgentInstances: engine.AgentInstances{DefaultCapacity: c.agentCapacity}, KafkaFsync: c.kafkaFsync, CommandsThroughKafka: c.throughKafka, EventStoreThroughNetwork: c.storeThroughNetwork, KafkaSyncTopics: append([]string{}, kafka.SplitBrokers(c.syncTopics)...), KafkaCompression: c.compression, Secure: c.secure, Workflows: []*domain.Workflow{demo.Workflow(), benchWorkflow(c.steps)},
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			return err
		}
		defer a.Close()
		embedded = a
		res.KafkaCompression, res.Partitions = c.compression, c.partitions
		for _, svc := range a.Services {
			svc.Latency = c.latency
			svc.KeyRetention = c.demoKeyRetention
		}
		<-a.Scheduler.Ready()
		brokers = a.KafkaBrokers
		*c.security = a.KafkaSecurity
		if c.workflow == "" {
			c.workflow = "bench"
		}
		fmt.Fprintf(os.Stderr, "embedded system in %s, %d-step workflow, service latency %s\n", dir, c.steps, c.latency)
	} else if c.workflow == "" {
		c.workflow = domain.DefaultWorkflow
	}
	kafkaOpts, err := c.security.Opts()
	if err != nil {
		return err
	}
	// The client keeps few finished orders: each is waited for as it runs.
	cl, err := client.New(ctx, client.Config{Brokers: brokers, KafkaOptions: kafkaOpts, RememberFinished: 1024 + c.concurrency})
	if err != nil {
		return err
	}
	defer cl.Close()

	run := fmt.Sprintf("%x", time.Now().UnixNano())
	if c.warmup > 0 {
		fmt.Fprintf(os.Stderr, "warming up with %d orders\n", c.warmup)
		warm := c
		warm.duration, warm.orders = 0, c.warmup
		if err := load(ctx, cl, warm, "warm-"+run, newRecorder(time.Hour, "", nil, io.Discard), nil); err != nil {
			return err
		}
	}
	if c.duration > 0 {
		fmt.Fprintf(os.Stderr, "submitting orders for %s, %s, figures every %s\n", c.duration, pace(c), c.window)
		res.Duration = c.duration.String()
	} else {
		fmt.Fprintf(os.Stderr, "submitting %d orders, %s, figures every %s\n", c.orders, pace(c), c.window)
	}
	for _, dir := range []string{c.heapDir, c.cpuDir} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if c.cpuDir != "" && c.cpuProfile != "" {
		return errors.New("--cpu-profiles and --cpuprofile exclude each other")
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var demoKeys func() int
	if embedded != nil {
		demoKeys = func() int {
			n := 0
			for _, svc := range embedded.Services {
				n += svc.KeysKept()
			}
			return n
		}
	}
	res.Calibration = &Calibration{}
	res.Calibration.StartComputeMicros, res.Calibration.StartMemoryMicros = calibrate()
	cpu0 := processCPU()
	start := time.Now()
	rec := newRecorder(c.window, c.heapDir, demoKeys, os.Stderr)
	rec.cpuDir = c.cpuDir
	rec.startCPUProfile()
	stopWindows, windowsDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(windowsDone); rec.run(stopWindows) }()
	err = load(ctx, cl, c, "bench-"+run, rec, res.Outcomes)
	close(stopWindows)
	<-windowsDone
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	res.Orders = rec.finished
	res.latencies = &rec.all
	if res.Embedded {
		res.PhaseMillis = map[string]float64{"submit": rec.phases.submit.percentiles()["p50"],
			"engine": rec.phases.engine.percentiles()["p50"], "reply": rec.phases.reply.percentiles()["p50"]}
	}
	res.Seconds = elapsed.Seconds()
	res.OrdersPerSec = float64(res.Orders) / elapsed.Seconds()
	res.StepsPerSec = res.OrdersPerSec * float64(c.steps)
	res.CPUSeconds = (processCPU() - cpu0).Seconds()
	if res.Orders > 0 {
		res.CPUMillisPerOrder = res.CPUSeconds * 1000 / float64(res.Orders)
	}
	res.LatencyMillis = rec.all.percentiles()
	res.LatencyByPriority = latencyByPriority(rec.byPriority)
	res.Calibration.EndComputeMicros, res.Calibration.EndMemoryMicros = calibrate()
	res.Windows = rec.windows
	res.Steady = steady(rec.windows, c.window)
	report(os.Stdout, res)
	if embedded != nil {
		fmt.Fprintln(os.Stderr, "metrics of the embedded system:")
		var b strings.Builder
		embedded.WriteMetrics(&b)
		for _, line := range strings.Split(b.String(), "\n") {
			// saga's own samples; histograms by their count and sum.
			if line != "" && strings.HasPrefix(line, "saga_") && !strings.Contains(line, "_bucket{") {
				fmt.Fprintln(os.Stderr, "  "+line)
			}
		}
	}
	if c.jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(c.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if c.svgOut != "" {
		if err := os.WriteFile(c.svgOut, []byte(histogramSVG(res)), 0o644); err != nil {
			return err
		}
	}
	if c.timelineOut != "" {
		if err := os.WriteFile(c.timelineOut, []byte(timelineSVG(res)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// replotResult draws the timeline of a result JSON written earlier (the
// latency histogram needs the run's own latencies, which JSON does not keep).
func replotResult(path string, c config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		return errors.Wrapf(err, "read %s", path)
	}
	if c.timelineOut == "" {
		return errors.New("--replot needs --timeline-svg")
	}
	return os.WriteFile(c.timelineOut, []byte(timelineSVG(&res)), 0o644)
}

func pace(c config) string {
	if c.rate > 0 {
		return fmt.Sprintf("at %.0f orders/s", c.rate)
	}
	return fmt.Sprintf("%d in flight", c.concurrency)
}

// load submits orders, keeping c.concurrency in flight or at c.rate, c.orders
// of them or for c.duration, and records each one's outcome in rec. It
// returns once every submitted order has finished.
func load(ctx context.Context, cl *client.Client, c config, prefix string, rec *recorder, outcomes map[string]int) error {
	var mu sync.Mutex
	var firstErr error
	slots := make(chan struct{}, max(c.concurrency, 1))
	var wg sync.WaitGroup
	stopProgress := progress(rec)
	defer stopProgress()
	var tick <-chan time.Time
	if c.rate > 0 {
		ticker := time.NewTicker(time.Duration(float64(time.Second) / c.rate))
		defer ticker.Stop()
		tick = ticker.C
	}
	var deadline <-chan time.Time
	if c.duration > 0 {
		timer := time.NewTimer(c.duration)
		defer timer.Stop()
		deadline = timer.C
	}
	defer wg.Wait()
	for i := 0; c.duration > 0 || i < c.orders; i++ {
		if tick != nil {
			select {
			case <-tick:
			case <-deadline:
				rec.drain()
				return wait(&wg, &mu, &firstErr)
			case <-ctx.Done():
				return ctx.Err()
			}
		} else {
			select {
			case slots <- struct{}{}:
			case <-deadline:
				rec.drain()
				return wait(&wg, &mu, &firstErr)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if tick == nil {
				defer func() { <-slots }()
			}
			id := fmt.Sprintf("%s-%07d", prefix, i)
			waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			t0 := time.Now()
			fields := map[string]any{"workflow": c.workflow, "items": []string{"book"}}
			p := c.priorities.of(i)
			if p != "" {
				fields["priority"] = string(p)
			}
			out, err := cl.Run(waitCtx, id, fields)
			rec.record(p, out, t0, time.Now())
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = errors.Wrapf(err, "order %s", id)
			}
			if outcomes != nil {
				outcomes[out.Final.Status]++
			}
		}(i)
	}
	rec.drain()
	return wait(&wg, &mu, &firstErr)
}

// wait waits for the orders in flight and returns the first error.
func wait(wg *sync.WaitGroup, mu *sync.Mutex, firstErr *error) error {
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return *firstErr
}

// progress prints, every 5 s, how many orders have finished and the rate
// over those 5 s.
func progress(rec *recorder) func() {
	stop := make(chan struct{})
	go func() {
		const every = 5 * time.Second
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		last := rec.Finished()
		for {
			select {
			case <-stop:
				return
			case <-ticker.C:
				d := rec.Finished()
				fmt.Fprintf(os.Stderr, "  %7d orders finished, %5.0f orders/s in the last %s\n", d, float64(d-last)/every.Seconds(), every)
				last = d
			}
		}
	}()
	return func() { close(stop) }
}

func report(w io.Writer, r *Result) {
	fmt.Fprintf(w, "orders %d (%s), %d steps each, service latency %s, %d CPUs\n", r.Orders, paceOf(r), r.Steps, r.ServiceDelay, r.CPUs)
	fmt.Fprintf(w, "  %.1f s: %.0f orders/s, %.0f steps/s\n", r.Seconds, r.OrdersPerSec, r.StepsPerSec)
	fmt.Fprintf(w, "  latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", r.LatencyMillis["p50"], r.LatencyMillis["p90"], r.LatencyMillis["p99"], r.LatencyMillis["max"])
	fmt.Fprintf(w, "  cpu: %.2f ms per order, %.0f %% of one core\n", r.CPUMillisPerOrder, r.CPUSeconds*100/r.Seconds)
	if p := r.PhaseMillis; p != nil {
		fmt.Fprintf(w, "  p50 ms: to the first event %.2f, to the final event %.2f, to the caller %.2f\n", p["submit"], p["engine"], p["reply"])
	}
	reportByPriority(w, r)
	reportSteady(w, r)
	if c := r.Calibration; c != nil {
		fmt.Fprintf(w, "  machine, one thread, before -> after: sha256 of 4 MiB %.0f -> %.0f µs, 2^18 random reads of 64 MiB %.0f -> %.0f µs\n",
			c.StartComputeMicros, c.EndComputeMicros, c.StartMemoryMicros, c.EndMemoryMicros)
	}
	fmt.Fprintf(w, "  outcomes: %v\n", r.Outcomes)
}

func paceOf(r *Result) string {
	if r.Rate > 0 {
		return fmt.Sprintf("%.0f/s", r.Rate)
	}
	return fmt.Sprintf("concurrency %d", r.Concurrency)
}
