package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/projections"
)

// Exit codes of watch, so that scripts can branch on the outcome.
const (
	exitProcessed   = 0
	exitError       = 1 // sagactl itself failed
	exitCompensated = 2
	exitFailed      = 3 // the task stopped in Error
	exitTimeout     = 4
	exitRejected    = 5 // saga refused the order: no task
)

// exitCode carries a process exit code through an error.
type exitCode struct {
	code int
	msg  string
}

func (e exitCode) Error() string { return e.msg }

// openStore connects to the event store and makes sure it answers within
// a few seconds, so that a command never waits silently on a server that
// is not there.
func openStore(ctx context.Context, c *common) (*eventstore.Store, error) {
	connection, err := eventstore.WithPasswordFile(string(c.eventstore), c.eventstorePasswordFile)
	if err != nil {
		return nil, err
	}
	store, err := eventstore.Dial(connection, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	probe, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := store.ReadStream(probe, "saga-sagactl-probe"); err != nil {
		store.Close()
		return nil, errors.Wrapf(err, "no answer from the event store at %s within 5s; is sagad running", eventstore.Redact(string(c.eventstore)))
	}
	return store, nil
}

// watch follows one order's events until it reaches a final state, or a
// status topic forever.
func watch(ctx context.Context, args []string) error {
	fs, c := flags("watch")
	topic := fs.String("topic", "", "follow this status topic (e.g. saga.status or a reply topic) instead of one order")
	timeout := fs.Duration("timeout", 0, "give up after this long (exit code 4); 0 waits for ever")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	if *topic != "" {
		return watchTopic(ctx, c, *topic)
	}
	if fs.NArg() != 1 {
		return errors.New("usage: sagactl watch [flags] ORDER_ID, or sagactl watch --topic TOPIC")
	}
	return watchOrder(ctx, c, fs.Arg(0))
}

// printStatus prints a status as a line, or as a JSON line with -o json.
func printStatus(c *common, st protocol.TaskStatus) {
	if *c.output == outputJSON {
		raw, _ := json.Marshal(st)
		fmt.Println(string(raw))
		return
	}
	line := fmt.Sprintf("%s  %-10s rev %-3d %-24s", st.Time.UTC().Format("2006-01-02T15:04:05.000Z"), clean(st.OrderID), st.Revision, clean(st.Status))
	if st.Step != "" {
		line += " " + clean(st.Step)
	}
	if st.Attempt > 0 {
		line += fmt.Sprintf(" (attempt %d)", st.Attempt)
	}
	if st.Reason != "" {
		line += ": " + clean(st.Reason)
	}
	fmt.Println(strings.TrimRight(line, " "))
}

func watchOrder(ctx context.Context, c *common, orderID string) error {
	store, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer store.Close()
	stream := domain.TaskStream(orderID)
	task := domain.NewTask(orderID)
	var final *protocol.TaskStatus
	stop := errors.New("final")
	err = store.SubscribeAll(ctx, domain.FromStart(), stream, func(it domain.SubscriptionItem) error {
		if it.Event == nil || it.Event.Stream != stream {
			return nil
		}
		ev, err := domain.DecodeEvent(it.Event.Type, it.Event.Data)
		if err != nil {
			return err
		}
		task.Apply(ev)
		st := protocol.StatusOf(task, ev, it.Event.Revision, it.Event.Recorded)
		printStatus(c, st)
		if st.Final() {
			final = &st
			return stop
		}
		return nil
	})
	switch {
	case final != nil:
		return outcomeCode(orderID, *final)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return exitCode{exitTimeout, "order " + orderID + " did not finish in time"}
	}
	return err
}

func watchTopic(ctx context.Context, c *common, topic string) error {
	client, err := openKafka(ctx, c, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer client.Close()
	for {
		fetches := client.PollFetches(ctx)
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil // a timeout just ends the following
			}
			return nil
		}
		fetches.EachRecord(func(r *kgo.Record) {
			st, err := protocol.ParseTaskStatus(r.Value)
			if err != nil {
				fmt.Printf("%s/%d/%d: not a status message: %s\n", r.Topic, r.Partition, r.Offset, truncate(string(r.Value)))
				return
			}
			printStatus(c, st)
		})
	}
}

// audit replays a task's stream and prints its timeline and state.
func audit(ctx context.Context, args []string) error {
	fs, c := flags("audit")
	at := fs.String("at", "", "show the state at this revision or RFC 3339 time")
	asJSON := fs.Bool("json", false, "print JSON (as --output json)")
	noLive := fs.Bool("no-live", false, "do not compare with the live projection of the API")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: sagactl audit [flags] TASK_ID")
	}
	cut, err := parseCut(*at)
	if err != nil {
		return err
	}
	store, err := openStore(ctx, c)
	if err != nil {
		return err
	}
	defer store.Close()
	recorded, err := store.ReadStream(ctx, domain.TaskStream(fs.Arg(0)))
	if err != nil {
		return err
	}
	report, err := projections.BuildAudit(fs.Arg(0), recorded, cut)
	if err != nil {
		return err
	}
	if *at == "" && !*noLive {
		live, err := fetchTask(ctx, c.api, fs.Arg(0))
		if err != nil {
			fmt.Fprintln(os.Stderr, "sagactl: no comparison with the live view:", err)
		} else {
			report.CompareWith(live)
		}
	}
	if *asJSON || *c.output == outputJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(report)
	} else {
		err = writeAuditText(os.Stdout, report)
	}
	if err == nil && len(report.Drift) > 0 {
		return exitCode{exitFailed, fmt.Sprintf("the live view of %s drifted from its stream in %d fields", fs.Arg(0), len(report.Drift))}
	}
	return err
}

func fetchTask(ctx context.Context, api, id string) (*protocol.TaskView, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/api/tasks/"+url.PathEscape(id), nil)
	if err != nil {
		return nil, err
	}
	resp, err := doAPI(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.Newf("GET task: %s", resp.Status)
	}
	var t protocol.TaskView
	return &t, json.NewDecoder(resp.Body).Decode(&t)
}

// replay asks sagad to rebuild its task view from the whole store (into a
// fresh file it swaps in once caught up, serving the old one meanwhile),
// waits for it and reports its speed.
func replay(ctx context.Context, args []string) error {
	fs, c := flags("replay")
	timeout := fs.Duration("timeout", time.Hour, "how long to wait for the rebuild")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := call(ctx, http.MethodPost, c.api+"/api/admin/task-view/rebuild", nil, nil); err != nil {
		return err
	}
	type report struct {
		Events   int64
		PerSec   float64 `json:"eventsPerSecond"`
		Started  time.Time
		Finished time.Time
		Counts   map[string]int
		File     string
		Error    string
	}
	var status struct {
		Rebuilding  bool
		LastRebuild *report
	}
	for {
		if err := call(ctx, http.MethodGet, c.api+"/api/admin/task-view", nil, &status); err != nil {
			return err
		}
		if !status.Rebuilding && status.LastRebuild != nil && !status.LastRebuild.Finished.IsZero() {
			break
		}
		select {
		case <-ctx.Done():
			return exitCode{exitTimeout, "the rebuild did not finish in time"}
		case <-time.After(100 * time.Millisecond):
		}
	}
	r := status.LastRebuild
	if r.Error != "" {
		return errors.Newf("rebuild failed: %s", r.Error)
	}
	if *c.output == outputJSON {
		return printJSON(r)
	}
	tasks := 0
	for _, n := range r.Counts {
		tasks += n
	}
	fmt.Printf("replayed %d events of %d tasks in %s: %.0f events/s, into %s\n", r.Events, tasks,
		r.Finished.Sub(r.Started).Round(time.Millisecond), r.PerSec, r.File)
	states := make([]string, 0, len(r.Counts))
	for state := range r.Counts {
		states = append(states, state)
	}
	sort.Strings(states)
	for _, state := range states {
		fmt.Printf("  %-12s %d\n", state, r.Counts[state])
	}
	return nil
}

// outcomeCode is the exit code of an order's final status.
func outcomeCode(orderID string, final protocol.TaskStatus) error {
	switch final.Status {
	case protocol.StatusProcessed:
		return nil
	case protocol.StatusCompensated:
		return exitCode{exitCompensated, "order " + orderID + " was compensated"}
	case protocol.StatusRejected:
		return exitCode{exitRejected, "order " + orderID + " was rejected: " + final.Reason}
	}
	return exitCode{exitFailed, "order " + orderID + " failed: " + final.Reason}
}
