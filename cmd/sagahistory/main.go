// Command sagahistory writes a history of finished tasks straight into the
// files of sagad's embedded event store, so that sagad can be started on a
// store of a chosen size:
//
//	go run ./cmd/sagahistory --data DIR --tasks 1000000
//	go run ./cmd/sagad --data DIR
//
// Each task is an order of the demo workflow that was processed: the events
// the engine records for it (TaskSubmitted; per step StepDispatched and
// StepSucceeded; TaskProcessed), decided by the domain's own functions and
// appended decision by decision with the same metadata and event ids as the
// engine's event-store adapter. It opens the store in DIR/eventstore itself,
// so sagad must not be running on DIR, and appends thousands of decisions per
// commit, which is much faster than submitting orders.
//
// Then it saves, through the engine's own event-store adapter, the
// checkpoints a system that had processed this history would have: those of
// the status publisher, the scheduler and the supervisor, at the history's
// last event, with no unfinished task (--checkpoints=false leaves them out,
// and sagad then starts as one pointed at a store it never followed: its
// status publisher publishes the statuses of the whole history). The task
// view is not written: sagad builds it at its first start.
//
// With --tasks 0 it only opens the store and reports how long that took and
// the memory in use after it.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/google/uuid"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/esdbserver/eslog"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

func main() {
	data := flag.String("data", "", "sagad's data directory; the store is DIR/eventstore (required)")
	tasks := flag.Int("tasks", 1000, "finished tasks to write; 0 only opens the store and reports")
	prefix := flag.String("prefix", "hist-", "prefix of the generated order ids")
	batch := flag.Int("batch", 5000, "tasks per bulk append")
	interval := flag.Duration("interval", 10*time.Millisecond, "time between generated orders; the history ends now")
	checkpoints := flag.Bool("checkpoints", true, "save the status publisher's, scheduler's and supervisor's checkpoints at the history's end, as a system that had run would have them")
	flag.Parse()
	if *data == "" {
		fmt.Fprintln(os.Stderr, "sagahistory: --data is required")
		os.Exit(2)
	}
	if err := run(filepath.Join(*data, "eventstore"), *tasks, *batch, *prefix, *interval, *checkpoints); err != nil {
		fmt.Fprintln(os.Stderr, "sagahistory:", err)
		os.Exit(1)
	}
}

func run(dir string, tasks, batch int, prefix string, interval time.Duration, checkpoints bool) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	start := time.Now()
	store, err := eslog.Open(eslog.Options{Dir: dir, Logger: logger})
	if err != nil {
		return err
	}
	opened := time.Since(start)
	if tasks == 0 {
		defer store.Close()
		report(store, opened)
		return nil
	}
	wf := demo.Workflow()
	if wf.Version == 0 {
		wf.Version = 1 // the version sagad gives the demo workflow when it registers it first
	}
	first := time.Now().Add(-time.Duration(tasks) * interval)
	var events int
	var last uint64
	for done := 0; done < tasks; {
		var appends []eslog.AppendRequest
		for ; done < tasks && len(appends) < batch*5; done++ {
			a, err := taskAppends(wf, fmt.Sprintf("%s%09d", prefix, done), first.Add(time.Duration(done)*interval))
			if err != nil {
				return err
			}
			appends = append(appends, a...)
		}
		results, errs := store.AppendAll(context.Background(), appends)
		for i, err := range errs {
			if err != nil {
				return errors.Wrapf(err, "append to %s", appends[i].Stream)
			}
			events += len(appends[i].Events)
			last = max(last, results[i].Position)
		}
		if done%100_000 < batch {
			fmt.Fprintf(os.Stderr, "%d tasks, %d events, %s\n", done, events, time.Since(start).Round(time.Millisecond))
		}
	}
	if err := store.Close(); err != nil {
		return err
	}
	if checkpoints {
		if err := saveCheckpoints(dir, last, logger); err != nil {
			return err
		}
	}
	took := time.Since(start)
	fmt.Printf("wrote %d tasks, %d events in %s (%.0f events/s) to %s\n", tasks, events, took.Round(time.Millisecond), float64(events)/took.Seconds(), dir)
	return nil
}

// saveCheckpoints serves the store on a loopback port for a moment and
// saves, through adapters/eventstore as the engine does, the checkpoints
// of the processes that follow the store, at position with no unfinished
// task.
func saveCheckpoints(dir string, position uint64, logger *slog.Logger) error {
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: dir, Logger: logger})
	if err != nil {
		return err
	}
	defer srv.Close()
	store, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false", srv.Addr()), logger)
	if err != nil {
		return err
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := store.SaveCheckpoint(ctx, processes.DefaultStatusCheckpoint, position); err != nil {
		return err
	}
	for _, name := range []string{processes.DefaultSchedulerCheckpoint, processes.DefaultSupervisorCheckpoint} {
		if err := store.SaveTaskCheckpoint(ctx, name, domain.TaskCheckpoint{Position: position}); err != nil {
			return err
		}
	}
	return nil
}

// report prints what opening the store cost.
func report(store *eslog.Store, opened time.Duration) {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	st := store.Stats()
	fmt.Printf("open %s, replayed %d bytes of log after the index checkpoint, %d index tables, heap in use %.1f MiB, RSS %s\n",
		opened.Round(time.Millisecond), st.Replayed, st.IndexTables, float64(m.HeapInuse)/(1<<20), rss())
}

func rss() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// taskAppends decides a processed order of wf as the engine would, one
// append per decision: the submission, the first dispatch, then one reply
// per step (its success and the next dispatch, or TaskProcessed).
func taskAppends(wf *domain.Workflow, id string, at time.Time) ([]eslog.AppendRequest, error) {
	raw, _ := json.Marshal(map[string]any{"orderId": id, "workflow": wf.Name, "items": []map[string]any{{"sku": "sku-1", "qty": 1}}, "amount": 42})
	trace := fmt.Sprintf("00-%032x-%016x-01", sha256.Sum256([]byte(id)), uint64(len(id)))[:55]
	submitted := domain.Submit(domain.Order{ID: id, Workflow: wf.Name, Body: raw}, wf, trace, at)
	task := domain.NewTask(id)
	d := domain.Decision{Now: at, Actor: "sagahistory"}
	decisions := [][]domain.Event{{submitted}}
	apply := func(evs []domain.Event) {
		for _, e := range evs {
			task.Apply(e)
		}
	}
	apply(decisions[0])
	next := task.Next(wf, d)
	apply(next)
	decisions = append(decisions, next)
	for _, step := range wf.StepNames() {
		d.Now = d.Now.Add(time.Millisecond)
		reply := domain.Reply{Step: step, Attempt: 1, Succeeded: true, Result: json.RawMessage(`{"ok":true}`)}
		evs, err := task.RecordReply(wf, reply, d)
		if err != nil {
			return nil, errors.Wrapf(err, "reply to %s of %s", step, id)
		}
		apply(evs)
		decisions = append(decisions, evs)
	}
	if task.State != domain.StateProcessed {
		return nil, errors.Newf("task %s ended %s, not processed", id, task.State)
	}
	stream := domain.TaskStream(id)
	meta, err := json.Marshal(domain.EventMetadata{CorrelationID: id, CausationID: "sagahistory", Actor: "sagahistory", TraceParent: trace})
	if err != nil {
		return nil, err
	}
	var out []eslog.AppendRequest
	revision := int64(-1)
	for _, evs := range decisions {
		a := eslog.AppendRequest{Stream: stream, Expected: eslog.NoStreamExpected}
		if revision >= 0 {
			a.Expected = eslog.Revision(uint64(revision))
		}
		for i, e := range evs {
			data, err := domain.EncodeEvent(e)
			if err != nil {
				return nil, err
			}
			a.Events = append(a.Events, eslog.ProposedEvent{
				ID: eventID(stream, uint64(revision+1)+uint64(i), e.EventType(), data), Type: e.EventType(),
				ContentType: "application/json", Metadata: meta, Data: data,
			})
		}
		revision += int64(len(evs))
		out = append(out, a)
	}
	return out, nil
}

// eventID is the id adapters/eventstore derives for an event appended at an
// exact expected revision (or no stream): a hash of stream, slot, type and
// data, so that the engine would recognise a retry of the same decision.
func eventID(stream string, slot uint64, typ string, data []byte) [16]byte {
	h := sha256.New()
	h.Write([]byte(stream))
	h.Write(binary.BigEndian.AppendUint64(nil, slot))
	h.Write([]byte(typ))
	h.Write(data)
	var id uuid.UUID
	copy(id[:], h.Sum(nil))
	id[6], id[8] = id[6]&0x0f|0x50, id[8]&0x3f|0x80 // version 5 layout, RFC 4122 variant
	return id
}
