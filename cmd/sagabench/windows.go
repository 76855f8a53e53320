package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/domain"
)

// histogram counts latencies in logarithmic buckets 1 % apart from 1 µs to
// about 20 minutes: percentiles within 1 %, in constant memory however
// long the run, so that the benchmark does not measure its own growth.
type histogram struct {
	counts [histogramBuckets]uint32
	n      uint64
	max    time.Duration
}

const histogramBuckets = 2100

var histogramGrowth = math.Log(1.01)

func (h *histogram) add(d time.Duration) {
	us := float64(d) / float64(time.Microsecond)
	i := 0
	if us > 1 {
		i = min(int(math.Log(us)/histogramGrowth), histogramBuckets-1)
	}
	h.counts[i]++
	h.n++
	h.max = max(h.max, d)
}

// bucketValue is the middle of bucket i.
func bucketValue(i int) time.Duration {
	return time.Duration(math.Exp((float64(i)+0.5)*histogramGrowth) * float64(time.Microsecond))
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile is the latency below which a share q of the counted ones fall.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n-1))
	var seen uint64
	for i, c := range h.counts {
		seen += uint64(c)
		if seen > rank {
			return min(bucketValue(i), h.max)
		}
	}
	return h.max
}

// percentiles are p50, p90, p99 and max, in milliseconds.
func (h *histogram) percentiles() map[string]float64 {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return map[string]float64{"p50": ms(h.quantile(0.50)), "p90": ms(h.quantile(0.90)), "p99": ms(h.quantile(0.99)), "max": ms(h.max)}
}

// Window is what one stretch of a run measured. Figures of the process
// (CPU, memory, GC) are this process's: with the embedded system, the
// whole system's, client and demo services included.
type Window struct {
	StartSeconds      float64            `json:"startSeconds"`
	EndSeconds        float64            `json:"endSeconds"`
	Orders            int                `json:"orders"`
	OrdersPerSec      float64            `json:"ordersPerSecond"`
	LatencyMillis     map[string]float64 `json:"latencyMillis"`
	CPUMillisPerOrder float64            `json:"cpuMillisPerOrder"`
	CPUPercent        float64            `json:"cpuPercent"`
	// GCPercent is the share of the window's CPU the Go runtime reckons
	// was spent collecting garbage.
	GCPercent float64 `json:"gcPercent"`
	// GCCycles are the collections the window ran, and AllocKiBPerOrder
	// the heap it allocated per finished order: with HeapLiveMiB, what
	// sets the GC's cost.
	GCCycles         uint64  `json:"gcCycles"`
	AllocKiBPerOrder float64 `json:"allocKiBPerOrder"`
	RSSMiB           float64 `json:"rssMiB"`
	// GoMiB is the memory the Go runtime holds (mapped and not released:
	// what its soft limit bounds), of which StacksMiB are goroutine stacks
	// and FreeMiB heap spans free or unused; RSS beyond GoMiB is memory
	// outside the Go runtime.
	GoMiB       float64 `json:"goMiB"`
	StacksMiB   float64 `json:"stacksMiB"`
	FreeMiB     float64 `json:"freeMiB"`
	HeapLiveMiB float64 `json:"heapLiveMiB"`
	Goroutines  int     `json:"goroutines"`
	// OthersCPUPercent is the CPU the rest of the machine used in the
	// window (percent of one CPU, as CPUPercent), and StealPercent the CPU
	// the hypervisor took from the machine: a window slower for either is
	// a busier machine, not a slower saga. Absent without /proc/stat.
	OthersCPUPercent float64 `json:"othersCpuPercent"`
	StealPercent     float64 `json:"stealPercent"`
	// DemoKeys are the idempotency keys the demo services hold (embedded).
	DemoKeys int `json:"demoKeys,omitempty"`
	// Draining says the window ran past the end of submission, while the
	// last orders finished: it is not a steady-state window.
	Draining bool `json:"draining,omitempty"`
}

// Steady compares the first and last full windows of a run.
type Steady struct {
	Window                   string  `json:"window"`
	First                    int     `json:"firstWindow"`
	Last                     int     `json:"lastWindow"`
	ThroughputLastOverFirst  float64 `json:"throughputLastOverFirst"`
	CPUPerOrderLastOverFirst float64 `json:"cpuPerOrderLastOverFirst"`
	MaxRSSMiB                float64 `json:"maxRSSMiB"`
	MemoryLimitMiB           float64 `json:"memoryLimitMiB,omitempty"`
}

// recorder collects each finished order into the whole run's figures and
// the current window's, and closes a window every period.
type recorder struct {
	mu         sync.Mutex
	all, cur   histogram
	curOrders  int
	byPriority map[domain.Priority]*histogram
	phases     struct{ submit, engine, reply histogram }
	windows    []Window
	finished   int

	start   time.Time
	period  time.Duration
	lastAt  time.Time
	lastCPU time.Duration
	lastGC  float64
	lastRT  runtimeCounters
	lastMT  machineTimes
	heapDir string
	// cpuDir, when set, gets a CPU profile of each window; cpuFile is the
	// current one's.
	cpuDir   string
	cpuFile  *os.File
	demoKeys func() int
	out      io.Writer
	drainAt  time.Time
}

func newRecorder(period time.Duration, heapDir string, demoKeys func() int, out io.Writer) *recorder {
	now := time.Now()
	return &recorder{byPriority: map[domain.Priority]*histogram{}, start: now, period: period, lastAt: now,
		lastCPU: processCPU(), lastGC: gcCPUSeconds(), lastRT: readRuntimeCounters(), lastMT: readMachineTimes(), heapDir: heapDir, demoKeys: demoKeys, out: out}
}

// record counts one finished order of priority p, sent at t0.
func (r *recorder) record(p domain.Priority, out client.Outcome, t0, end time.Time) {
	d := end.Sub(t0)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all.add(d)
	r.cur.add(d)
	r.curOrders++
	r.finished++
	if p != "" {
		h := r.byPriority[p]
		if h == nil {
			h = &histogram{}
			r.byPriority[p] = h
		}
		h.add(d)
	}
	if len(out.Statuses) > 0 && out.Statuses[0].Revision == 0 && !out.Final.Time.IsZero() {
		first := out.Statuses[0].Time
		r.phases.submit.add(first.Sub(t0))
		r.phases.engine.add(out.Final.Time.Sub(first))
		r.phases.reply.add(end.Sub(out.Final.Time))
	}
}

// Finished is how many orders have finished so far.
func (r *recorder) Finished() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finished
}

// run closes a window every period until stop is closed, then the last,
// partial one.
func (r *recorder) run(stop <-chan struct{}) {
	ticker := time.NewTicker(r.period)
	defer ticker.Stop()
	for {
		select {
		case <-stop:
			r.closeWindow()
			r.stopCPUProfile(-1)
			return
		case <-ticker.C:
			r.closeWindow()
		}
	}
}

// drain notes that submission stopped: windows that end later than a
// twentieth of a period after it are the run's tail.
func (r *recorder) drain() {
	r.mu.Lock()
	if r.drainAt.IsZero() {
		r.drainAt = time.Now()
	}
	r.mu.Unlock()
}

func (r *recorder) closeWindow() {
	now, cpu, gc, rt, mt := time.Now(), processCPU(), gcCPUSeconds(), readRuntimeCounters(), readMachineTimes()
	r.mu.Lock()
	h, n := r.cur, r.curOrders
	// A window is the run's tail if submission stopped well before its
	// end: the one the deadline falls at the end of is still whole.
	draining := !r.drainAt.IsZero() && r.drainAt.Before(r.lastAt.Add(r.period*19/20))
	r.cur, r.curOrders = histogram{}, 0
	r.mu.Unlock()
	secs := now.Sub(r.lastAt).Seconds()
	if secs <= 0 || (draining && n == 0) {
		return
	}
	w := Window{StartSeconds: r.lastAt.Sub(r.start).Seconds(), EndSeconds: now.Sub(r.start).Seconds(), Orders: n,
		OrdersPerSec: float64(n) / secs, LatencyMillis: h.percentiles(), CPUPercent: (cpu - r.lastCPU).Seconds() * 100 / secs,
		RSSMiB: float64(residentBytes()) / (1 << 20), HeapLiveMiB: float64(heapLiveBytes()) / (1 << 20),
		GoMiB: float64(rt.held) / (1 << 20), StacksMiB: float64(rt.stacks) / (1 << 20), FreeMiB: float64(rt.free) / (1 << 20),
		GCCycles:   rt.cycles - r.lastRT.cycles,
		Goroutines: runtime.NumGoroutine(), Draining: draining}
	if n > 0 {
		w.CPUMillisPerOrder = (cpu - r.lastCPU).Seconds() * 1000 / float64(n)
		w.AllocKiBPerOrder = float64(rt.allocated-r.lastRT.allocated) / 1024 / float64(n)
	}
	if used := (cpu - r.lastCPU).Seconds(); used > 0 {
		w.GCPercent = (gc - r.lastGC) * 100 / used
	}
	if mt.ok && r.lastMT.ok {
		w.OthersCPUPercent = max(0, (mt.busy-r.lastMT.busy)*100/secs-w.CPUPercent)
		w.StealPercent = (mt.steal - r.lastMT.steal) * 100 / secs
	}
	if r.demoKeys != nil {
		w.DemoKeys = r.demoKeys()
	}
	r.lastAt, r.lastCPU, r.lastGC, r.lastRT, r.lastMT = now, cpu, gc, rt, mt
	r.mu.Lock()
	r.windows = append(r.windows, w)
	index := len(r.windows) - 1
	r.mu.Unlock()
	tail := ""
	if draining {
		tail = " (draining)"
	}
	fmt.Fprintf(r.out, "  window %d [%4.0fs-%4.0fs]: %5.0f orders/s  p50 %6.1f ms  p99 %6.1f ms  cpu %.2f ms/order (%3.0f %%)  gc %4.1f %% (%d cycles, %.0f KiB/order)  rss %4.0f MiB (go %4.0f, stacks %3.0f, free %3.0f)  heap %4.0f MiB  others %3.0f %% steal %2.0f %%%s\n",
		index, w.StartSeconds, w.EndSeconds, w.OrdersPerSec, w.LatencyMillis["p50"], w.LatencyMillis["p99"], w.CPUMillisPerOrder, w.CPUPercent,
		w.GCPercent, w.GCCycles, w.AllocKiBPerOrder, w.RSSMiB, w.GoMiB, w.StacksMiB, w.FreeMiB, w.HeapLiveMiB, w.OthersCPUPercent, w.StealPercent, tail)
	if r.heapDir != "" {
		writeHeapProfile(filepath.Join(r.heapDir, fmt.Sprintf("heap-%03d.pb.gz", index)))
	}
	r.stopCPUProfile(index)
	r.startCPUProfile()
}

// startCPUProfile starts profiling the next window, with --cpu-profiles.
func (r *recorder) startCPUProfile() {
	if r.cpuDir == "" {
		return
	}
	f, err := os.CreateTemp(r.cpuDir, "window-*.tmp")
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sagabench: cpu profile:", err)
		return
	}
	r.cpuFile = f
}

// stopCPUProfile ends the window's profile and names it after window
// index; a negative index discards it (a profile of no window).
func (r *recorder) stopCPUProfile(index int) {
	if r.cpuFile == nil {
		return
	}
	pprof.StopCPUProfile()
	_ = r.cpuFile.Close()
	if index < 0 {
		_ = os.Remove(r.cpuFile.Name())
	} else {
		_ = os.Rename(r.cpuFile.Name(), filepath.Join(r.cpuDir, fmt.Sprintf("cpu-%03d.pb.gz", index)))
	}
	r.cpuFile = nil
}

// steady compares the first and the last full, steady windows: those of
// the whole period that ended before submission stopped.
func steady(windows []Window, period time.Duration) *Steady {
	var full []int
	for i, w := range windows {
		if !w.Draining && w.EndSeconds-w.StartSeconds >= 0.95*period.Seconds() {
			full = append(full, i)
		}
	}
	if len(full) == 0 {
		return nil
	}
	first, last := windows[full[0]], windows[full[len(full)-1]]
	s := &Steady{Window: period.String(), First: full[0], Last: full[len(full)-1]}
	if first.OrdersPerSec > 0 {
		s.ThroughputLastOverFirst = last.OrdersPerSec / first.OrdersPerSec
	}
	if first.CPUMillisPerOrder > 0 {
		s.CPUPerOrderLastOverFirst = last.CPUMillisPerOrder / first.CPUMillisPerOrder
	}
	for _, w := range windows {
		s.MaxRSSMiB = max(s.MaxRSSMiB, w.RSSMiB)
	}
	if limit := memoryLimit(); limit > 0 && limit < math.MaxInt64 {
		s.MemoryLimitMiB = float64(limit) / (1 << 20)
	}
	return s
}

func reportSteady(w io.Writer, r *Result) {
	s := r.Steady
	if s == nil || s.First == s.Last {
		return
	}
	first, last := r.Windows[s.First], r.Windows[s.Last]
	fmt.Fprintf(w, "  steady state (%s windows): first %d %.0f orders/s p99 %.1f ms %.2f cpu ms/order; last %d %.0f orders/s p99 %.1f ms %.2f cpu ms/order\n",
		s.Window, s.First, first.OrdersPerSec, first.LatencyMillis["p99"], first.CPUMillisPerOrder, s.Last, last.OrdersPerSec, last.LatencyMillis["p99"], last.CPUMillisPerOrder)
	fmt.Fprintf(w, "  last/first: throughput %.2fx, cpu per order %.2fx; max RSS %.0f MiB (soft limit %.0f MiB)\n",
		s.ThroughputLastOverFirst, s.CPUPerOrderLastOverFirst, s.MaxRSSMiB, s.MemoryLimitMiB)
}

// gcCPUSeconds is the CPU the runtime reckons it spent collecting garbage.
func gcCPUSeconds() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}

// runtimeCounters are the Go runtime's cumulative counters a window
// differences, and its mapped memory.
type runtimeCounters struct{ cycles, allocated, held, stacks, free uint64 }

func readRuntimeCounters() runtimeCounters {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}, {Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"}}
	metrics.Read(s)
	v := make([]uint64, len(s))
	for i := range s {
		if s[i].Value.Kind() == metrics.KindUint64 {
			v[i] = s[i].Value.Uint64()
		}
	}
	return runtimeCounters{cycles: v[0], allocated: v[1], held: v[2] - v[3], stacks: v[4], free: v[5] + v[6]}
}

// heapLiveBytes is the heap the last collection found live.
func heapLiveBytes() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// memoryLimit is the Go runtime's soft memory limit.
func memoryLimit() int64 {
	s := []metrics.Sample{{Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// residentBytes is this process's resident set size, from /proc (0 where
// there is none).
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sagabench: heap profile:", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, "sagabench: heap profile:", err)
	}
}
