package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/kafka/broker"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestMeasureHistory measures, when SAGA_MEASURE_HISTORY is set to a number
// of tasks, what a whole sagad costs over a long history (issue 13,
// "Bounded state"). It writes that many finished three-step tasks with
// cmd/sagahistory into a fresh data directory, then starts the built
// cmd/sagad binary on it as a child process, twice:
//
//   - the first start, on a store with no task view but with the
//     checkpoints of the status publisher, scheduler and supervisor that a
//     system that had run would have (sagahistory writes them): the view
//     is built from the whole store once;
//   - a restart after a clean stop, with the view and checkpoints present.
//
// Each start is timed until /readyz answers 200 (the task view has caught
// up, both servers answer) and until a first order is Processed (the
// scheduler, supervisor and agents are live). After the restart it walks
// every page of GET /api/tasks?state=Processed by cursor (default pages, then
// pages of 1,000, twice), runs
// SAGA_MEASURE_LOAD (default 60 s) of orders at 64 in flight through the
// client package, and reads sagad's VmRSS and VmHWM after each phase. It
// reports; it asserts no target. Run:
//
//	SAGA_MEASURE_HISTORY=100000 go test -run MeasureHistory -v -timeout 60m ./integration/
//	SAGA_MEASURE_HISTORY=1000000 go test -run MeasureHistory -v -timeout 60m ./integration/
//
// The data directory is under $TMPDIR and removed at the end.
func TestMeasureHistory(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("SAGA_MEASURE_HISTORY"))
	if err != nil {
		t.Skip("a measurement: set SAGA_MEASURE_HISTORY to a number of finished tasks")
	}
	load := 60 * time.Second
	if d, err := time.ParseDuration(os.Getenv("SAGA_MEASURE_LOAD")); err == nil {
		load = d
	}
	bin := t.TempDir()
	for _, cmd := range []string{"sagad", "sagahistory"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(bin, cmd), "../cmd/"+cmd).CombinedOutput()
		require.NoError(t, err, "build %s: %s", cmd, out)
	}
	data := t.TempDir()

	began := time.Now()
	gen := exec.Command(filepath.Join(bin, "sagahistory"), "--data", data, "--tasks", strconv.Itoa(n))
	out, err := gen.CombinedOutput()
	require.NoError(t, err, "sagahistory: %s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("history: %s (%v); store %s", lines[len(lines)-1], time.Since(began).Round(time.Second), du(filepath.Join(data, "eventstore")))
	events := 8 * n // TaskSubmitted, 3 × (StepDispatched, StepSucceeded), TaskProcessed

	d := &sagadChild{t: t, bin: filepath.Join(bin, "sagad"), data: data}
	first := d.start("first")
	t.Logf("first start (task view built from the store; the processes' checkpoints written by sagahistory): API answers %v, first order processed %v, view caught up (ready) %v (%.0f events/s); RSS %s, peak %s",
		first.serving.Round(time.Millisecond), first.live.Round(time.Millisecond), first.ready.Round(time.Millisecond), float64(events)/first.ready.Seconds(), first.rss, first.hwm)
	// sagahistory saved the status publisher's checkpoint, as a system
	// that had run would have it, so the first start publishes nothing of
	// the history (with --checkpoints=false it would publish all of it).
	// Wait for the broker's steady state anyway (nothing being published,
	// every partition within retention), so that the restart below starts
	// on it.
	retained := d.awaitRetention(broker.DefaultRetention.MaxRecords)
	rss, hwm := d.memory()
	t.Logf("first start, after the broker's retention pass (%v later): RSS %s, peak %s", retained.Round(time.Second), rss, hwm)
	d.stop()
	t.Logf("task view %s", du(filepath.Join(data, "taskview")))

	again := d.start("restart")
	t.Logf("restart (view and checkpoints present): API answers %v, first order processed %v, ready %v; RSS %s, peak %s",
		again.serving.Round(time.Millisecond), again.live.Round(time.Millisecond), again.ready.Round(time.Millisecond), again.rss, again.hwm)

	// The first walk right after the restart, with the API's default page
	// (100 tasks), reads pages no cache holds yet: SQLite's, and on this
	// machine the OS's too (it keeps about 3 GB of file pages, so the
	// oldest rows of a big view come from the disk). The walks of pages of
	// 1,000 (the most a page holds) follow.
	for _, walk := range []struct {
		name  string
		limit int
	}{{"first walk after the restart, default page", 0}, {"pages of 1,000", 1000}, {"pages of 1,000 again", 1000}} {
		pages, total, lat := d.walkPages(walk.limit)
		t.Logf("paging, %s: %d pages, %d Processed tasks, per page p50 %v p99 %v max %v", walk.name, pages, total,
			lat[len(lat)/2].Round(10*time.Microsecond), lat[len(lat)*99/100].Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond))
	}

	joined := d.join()
	t.Logf("a second sagad --roles scheduler,supervisor joined: live in %v", joined.Round(time.Millisecond))

	orders, p50, p99 := d.load(load, 64)
	rss, hwm = d.memory()
	t.Logf("load: %d orders in %v at 64 in flight (%.0f orders/s, p50 %v p99 %v); RSS after %s, peak %s",
		orders, load, float64(orders)/load.Seconds(), p50.Round(time.Millisecond), p99.Round(time.Millisecond), rss, hwm)
	byFirst, bySecond := d.dispatchersOfNewest(1000)
	t.Logf("steps of the newest 1,000 tasks dispatched by the first instance %d, by the second %d", byFirst, bySecond)
	d.stop()
}

// join starts a second sagad with the scheduler and supervisor roles on the
// first one's Kafka and event store, and reports how long it took to log
// that it is live (caught up from its checkpoints).
func (d *sagadChild) join() time.Duration {
	t := d.t
	logPath := filepath.Join(t.TempDir(), "sagad-second.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(d.bin, "--data", t.TempDir(), "--roles", "scheduler,supervisor", "--instance", "second",
		"--kafka-brokers", d.kafka, "--eventstore", "esdb://"+d.es+"?tls=false")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	began := time.Now()
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); <-exited })
	for {
		raw, err := os.ReadFile(logPath)
		require.NoError(t, err)
		if strings.Contains(string(raw), "saga is live") {
			return time.Since(began)
		}
		select {
		case <-exited:
			t.Fatalf("the second sagad stopped: %s", raw)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Since(began) > 5*time.Minute {
			t.Fatalf("the second sagad did not go live: %s", raw)
		}
	}
}

// dispatchersOfNewest counts the steps of the newest n tasks by the
// instance that dispatched them, the first or the second ("scheduler/second").
func (d *sagadChild) dispatchersOfNewest(n int) (first, second int) {
	resp, err := http.Get(fmt.Sprintf("http://%s/api/tasks?limit=%d", d.httpAd, n))
	require.NoError(d.t, err)
	defer resp.Body.Close()
	var page struct {
		Tasks []struct {
			Steps []struct {
				LockedBy string `json:"lockedBy"`
			} `json:"steps"`
		} `json:"tasks"`
	}
	require.NoError(d.t, json.NewDecoder(resp.Body).Decode(&page))
	for _, task := range page.Tasks {
		for _, st := range task.Steps {
			switch {
			case strings.HasSuffix(st.LockedBy, "/second"):
				second++
			case st.LockedBy != "":
				first++
			}
		}
	}
	return first, second
}

// sagadChild is a sagad process on a data directory, on free ports.
type sagadChild struct {
	t                 *testing.T
	bin, data         string
	cmd               *exec.Cmd
	exited            chan struct{}
	kafka, es, httpAd string
}

// startFigures are what a start measured.
type startFigures struct {
	// serving: the API answers GET /api/tasks (while its view may still be
	// catching up); live: a first order, sent then, was processed
	// (scheduler, supervisor, agents and status publisher at work); ready:
	// /readyz answers 200 (the task view has caught up with the store).
	serving, live, ready time.Duration
	rss, hwm             string
}

// start starts sagad and times it: until the API answers, until a first
// order sent as soon as it does is processed, and until /readyz.
func (d *sagadChild) start(name string) startFigures {
	t := d.t
	d.kafka, d.es, d.httpAd = freeAddr(t), freeAddr(t), freeAddr(t)
	d.cmd = exec.Command(d.bin, "--data", d.data, "--kafka-listen", d.kafka, "--eventstore-listen", d.es,
		"--http-listen", d.httpAd, "--demo-agents")
	logFile, err := os.Create(filepath.Join(t.TempDir(), "sagad-"+name+".log"))
	require.NoError(t, err)
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	began := time.Now()
	require.NoError(t, d.cmd.Start())
	cmd, exited := d.cmd, make(chan struct{})
	d.exited = exited
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	var f startFigures
	processed := make(chan error, 1)
	answers := func(path string) bool {
		resp, err := http.Get("http://" + d.httpAd + path)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	for f.ready == 0 || f.live == 0 {
		if f.serving == 0 && answers("/api/tasks?limit=1") {
			f.serving = time.Since(began)
			go func() {
				cl, err := client.New(context.Background(), client.Config{Brokers: []string{d.kafka}})
				if err != nil {
					processed <- err
					return
				}
				defer cl.Close()
				runCtx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
				defer cancel()
				outcome, err := cl.Run(runCtx, fmt.Sprintf("%s-%d", name, time.Now().UnixNano()), map[string]any{"items": []string{"book"}})
				if err == nil && outcome.Final.Status != "processed" {
					err = fmt.Errorf("the first order ended %s", outcome.Final.Status)
				}
				processed <- err
			}()
		}
		if f.serving != 0 && f.ready == 0 && answers("/readyz") {
			f.ready = time.Since(began)
		}
		select {
		case err := <-processed:
			require.NoError(t, err)
			f.live = time.Since(began)
		case <-exited:
			raw, _ := os.ReadFile(logFile.Name())
			t.Fatalf("sagad stopped: %s", raw)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Since(began) > 30*time.Minute {
			raw, _ := os.ReadFile(logFile.Name())
			t.Fatalf("sagad did not get ready: %s", raw)
		}
	}
	f.rss, f.hwm = d.memory()
	return f
}

// stop stops sagad with SIGTERM and waits for it.
func (d *sagadChild) stop() {
	require.NoError(d.t, d.cmd.Process.Signal(syscall.SIGTERM))
	<-d.exited
}

// memory reads sagad's resident set and its peak.
// awaitRetention waits until the child's embedded broker is in its steady
// state: nothing more is being published (the end offsets did not move for
// three seconds: the status publisher has caught up with the history) and
// no partition holds more than maxRecords records (a retention pass ran
// after that). It reports how long that took.
func (d *sagadChild) awaitRetention(maxRecords int64) time.Duration {
	t := d.t
	began := time.Now()
	client, err := kafka.NewClient([]string{d.kafka})
	require.NoError(t, err)
	defer client.Close()
	adm := kadm.NewClient(client)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var lastEnds int64
	still := 0
	for {
		topics, err := adm.ListTopics(ctx)
		require.NoError(t, err)
		starts, err := adm.ListStartOffsets(ctx, topics.Names()...)
		require.NoError(t, err)
		ends, err := adm.ListEndOffsets(ctx, topics.Names()...)
		require.NoError(t, err)
		over := false
		var sumEnds int64
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic == protocol.AgentsTopic {
				return // heartbeats keep coming; the topic is compacted, not retained
			}
			sumEnds += o.Offset
			if start, ok := starts.Lookup(o.Topic, o.Partition); ok && o.Offset-start.Offset > maxRecords {
				over = true
			}
		})
		if sumEnds == lastEnds {
			still++
		} else {
			still, lastEnds = 0, sumEnds
		}
		if !over && still >= 3 {
			return time.Since(began)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the broker did not settle with every partition at %d records or fewer in 10 minutes", maxRecords)
		case <-time.After(time.Second):
		}
	}
}

func (d *sagadChild) memory() (rss, hwm string) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	require.NoError(d.t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rss = mib(v)
		}
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			hwm = mib(v)
		}
	}
	return rss, hwm
}

func mib(kB string) string {
	n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kB), "kB")))
	return fmt.Sprintf("%.0f MiB", float64(n)/1024)
}

// walkPages reads every page of the Processed tasks by cursor and returns
// the page count, the task count and the sorted page latencies.
func (d *sagadChild) walkPages(limit int) (pages, total int, lat []time.Duration) {
	cursor := ""
	// One buffer for every answer, as curl's own: the latency is the API's,
	// not that of growing a client's buffer 2 MB at a time.
	var buf bytes.Buffer
	buf.Grow(8 << 20)
	for {
		q := url.Values{"state": {"Processed"}}
		if limit > 0 {
			q.Set("limit", strconv.Itoa(limit))
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		// The latency of the request, as curl's time_total: until the
		// whole answer is read; decoding it is the client's business.
		t0 := time.Now()
		resp, err := http.Get("http://" + d.httpAd + "/api/tasks?" + q.Encode())
		require.NoError(d.t, err)
		buf.Reset()
		_, err = buf.ReadFrom(resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(t0))
		body := buf.Bytes()
		require.NoError(d.t, err)
		require.Equal(d.t, http.StatusOK, resp.StatusCode)
		var page struct {
			Tasks      []json.RawMessage `json:"tasks"`
			NextCursor string            `json:"nextCursor"`
		}
		require.NoError(d.t, json.Unmarshal(body, &page))
		pages++
		total += len(page.Tasks)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	// Where the slowest pages fell in the walk tells a warm-up (all at the
	// start) from interference (anywhere).
	order := make([]int, len(lat))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return lat[order[i]] > lat[order[j]] })
	var slowest []string
	for _, i := range order[:min(10, len(order))] {
		slowest = append(slowest, fmt.Sprintf("#%d %v", i, lat[i].Round(100*time.Microsecond)))
	}
	d.t.Logf("slowest pages of the walk (page number, latency): %s", strings.Join(slowest, ", "))
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return pages, total, lat
}

// load keeps inFlight orders running for d and returns how many finished
// and their p50 and p99 latency.
func (d *sagadChild) load(dur time.Duration, inFlight int) (int, time.Duration, time.Duration) {
	cl, err := client.New(context.Background(), client.Config{Brokers: []string{d.kafka}})
	require.NoError(d.t, err)
	defer cl.Close()
	deadline := time.Now().Add(dur)
	var mu sync.Mutex
	var lat []time.Duration
	var seq, failed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < inFlight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				t0 := time.Now()
				out, err := cl.Run(ctx, fmt.Sprintf("load-%d-%d", deadline.UnixNano(), seq.Add(1)), map[string]any{"items": []string{"book"}})
				cancel()
				if err != nil || out.Final.Status != "processed" {
					failed.Add(1)
					continue
				}
				mu.Lock()
				lat = append(lat, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Zero(d.t, failed.Load(), "every order of the load is processed")
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return len(lat), lat[len(lat)/2], lat[len(lat)*99/100]
}

// du is the size of a directory tree.
func du(dir string) string {
	var size int64
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			size += info.Size()
		}
		return nil
	})
	return fmt.Sprintf("%.0f MiB", float64(size)/(1<<20))
}
