package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/projections"
)

// handful is how many tasks or dead letters a bulk action takes without
// --yes or a confirmation.
const handful = 5

// taskFilter holds the flags that select tasks for bulk actions and
// overdue.
type taskFilter struct {
	state, workflow, step, reason, since, until string
	olderThan                                   time.Duration
	max                                         int
	dryRun, yes                                 bool
}

// filterFlags registers the task filters on a command's flags; confirm
// adds --dry-run and --yes.
func filterFlags(fs *flag.FlagSet, confirm bool) *taskFilter {
	f := &taskFilter{}
	fs.StringVar(&f.state, "state", "", "only tasks in this state")
	fs.StringVar(&f.workflow, "workflow", "", "only tasks of this workflow")
	fs.StringVar(&f.step, "step", "", "only tasks at this step (in flight, retrying, failed or being compensated there)")
	fs.StringVar(&f.reason, "reason-contains", "", "only tasks whose reason contains this (ignoring ASCII case)")
	fs.DurationVar(&f.olderThan, "older-than", 0, "only tasks submitted longer ago than this (e.g. 30m)")
	fs.StringVar(&f.since, "since", "", "only tasks submitted at or after this RFC 3339 time")
	fs.StringVar(&f.until, "until", "", "only tasks submitted before this RFC 3339 time")
	fs.IntVar(&f.max, "max", 0, "act on at most this many tasks, the newest first (0: all)")
	if confirm {
		fs.BoolVar(&f.dryRun, "dry-run", false, "list the tasks it would act on, and do nothing")
		fs.BoolVar(&f.yes, "yes", false, fmt.Sprintf("act on more than %d tasks without asking", handful))
	}
	return f
}

// given reports whether any filter was set: a bulk action needs one.
func (f *taskFilter) given() bool {
	return f.state != "" || f.workflow != "" || f.step != "" || f.reason != "" || f.olderThan > 0 || f.since != "" || f.until != ""
}

// query is the filter as a task query in one state (none when empty).
func (f *taskFilter) query(state domain.TaskState) (projections.TaskQuery, error) {
	q := projections.TaskQuery{State: state, Workflow: f.workflow, Step: f.step, Reason: f.reason}
	for _, b := range []struct {
		flag, value string
		into        *time.Time
	}{{"--since", f.since, &q.Since}, {"--until", f.until, &q.Until}} {
		if b.value == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, b.value)
		if err != nil {
			return q, errors.Newf("%s must be an RFC 3339 time such as 2026-11-22T10:00:00Z, not %q", b.flag, b.value)
		}
		*b.into = t
	}
	if f.olderThan > 0 {
		if cut := time.Now().Add(-f.olderThan); q.Until.IsZero() || cut.Before(q.Until) {
			q.Until = cut
		}
	}
	return q, nil
}

// states are the states to list: the --state given, which must be one of
// allowed, or every allowed one.
func (f *taskFilter) states(action string, allowed ...domain.TaskState) ([]domain.TaskState, error) {
	if f.state == "" {
		return allowed, nil
	}
	st, ok := domain.ParseTaskState(f.state)
	if !ok || !slices.Contains(allowed, st) {
		names := make([]string, len(allowed))
		for i, a := range allowed {
			names[i] = string(a)
		}
		return nil, errors.Newf("%s acts on tasks in %s, not --state %s", action, strings.Join(names, " or "), f.state)
	}
	return []domain.TaskState{st}, nil
}

// values are a task query's URL parameters for GET /api/tasks.
func values(q projections.TaskQuery) url.Values {
	v := url.Values{"limit": {strconv.Itoa(projections.MaxPageSize)}}
	for name, s := range map[string]string{"state": string(q.State), "workflow": q.Workflow, "step": q.Step, "reason": q.Reason} {
		if s != "" {
			v.Set(name, s)
		}
	}
	for name, t := range map[string]time.Time{"since": q.Since, "until": q.Until} {
		if !t.IsZero() {
			v.Set(name, t.UTC().Format(time.RFC3339Nano))
		}
	}
	return v
}

// listTasks pages through GET /api/tasks for q, newest first, handing fn
// every task. A task outside the filter (an API too old to know one of
// them ignores it) is an error: nothing may be acted on that the operator
// did not select.
func listTasks(ctx context.Context, c *common, q projections.TaskQuery, fn func(*protocol.TaskView)) error {
	params := values(q)
	for {
		var page protocol.TaskList
		if err := call(ctx, http.MethodGet, c.api+"/api/tasks?"+params.Encode(), nil, &page); err != nil {
			return err
		}
		for _, t := range page.Tasks {
			if !q.Matches(t) {
				return errors.Newf("the API at %s listed task %s, which the filter excludes: is sagad older than sagactl? Nothing was done", c.api, t.ID)
			}
			fn(t)
		}
		if page.NextCursor == "" {
			return nil
		}
		params.Set("cursor", page.NextCursor)
	}
}

// selectTasks lists the tasks of every state that pass the filter, newest
// first, at most --max.
func selectTasks(ctx context.Context, c *common, f *taskFilter, states []domain.TaskState) ([]*protocol.TaskView, error) {
	var out []*protocol.TaskView
	for _, st := range states {
		q, err := f.query(st)
		if err != nil {
			return nil, err
		}
		if err := listTasks(ctx, c, q, func(t *protocol.TaskView) { out = append(out, t) }); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(out, func(a, b *protocol.TaskView) int { return b.SubmittedAt.Compare(a.SubmittedAt) })
	if f.max > 0 && len(out) > f.max {
		out = out[:f.max]
	}
	return out, nil
}

// atStep names the step a task is at: the one that failed, else the first
// in flight, retrying or being compensated.
func atStep(t *protocol.TaskView) string {
	if t.FailedStep != "" {
		return t.FailedStep
	}
	for _, s := range t.Steps {
		if slices.Contains(projections.ActiveStepStates, s.State) {
			return s.Name
		}
	}
	return ""
}

// confirm asks before acting on more than a handful of things: yes when
// --yes was given, else on a terminal the operator's answer; without a
// terminal it refuses.
func confirm(yes bool, n int, what string) error {
	if yes || n <= handful {
		return nil
	}
	if !interactive() {
		return errors.Newf("%s would act on %d; pass --yes to go ahead, or --dry-run to list them", what, n)
	}
	fmt.Fprintf(os.Stderr, "%s on %d? [y/N] ", what, n)
	answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errors.New("nothing done")
	}
	return nil
}

// interactive reports whether stdin is a terminal someone can answer
// from: a character device, and not the null device.
func interactive() bool {
	info, err := os.Stdin.Stat()
	if err != nil || info.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(info, null)
}

// outcome is what became of one item of a bulk action.
type outcome struct {
	ID    string `json:"id"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// bulkReport is a bulk action's answer with -o json.
type bulkReport struct {
	Action    string `json:"action"`
	DryRun    bool   `json:"dryRun"`
	Matched   int    `json:"matched"`
	Succeeded int    `json:"succeeded"`
	Failed    int    `json:"failed"`
	// Interrupted counts the items not attempted after an interrupt.
	Interrupted int       `json:"interrupted,omitempty"`
	Items       any       `json:"items"`
	Outcomes    []outcome `json:"outcomes,omitempty"`
}

// runBulk carries out act on each of the items, printing each outcome as
// it comes (a table line) or all at the end (JSON), and fails if any
// failed. Interrupted, it stops between items.
func runBulk(ctx context.Context, c *common, report bulkReport, ids []string, act func(i int) error) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	if *c.output == outputTable {
		fmt.Fprintln(tw, "ID\tRESULT")
	}
	for i, id := range ids {
		if ctx.Err() != nil {
			report.Interrupted = len(ids) - i
			break
		}
		o := outcome{ID: id, OK: true}
		if err := act(i); err != nil {
			o.OK, o.Error = false, err.Error()
			report.Failed++
		} else {
			report.Succeeded++
		}
		report.Outcomes = append(report.Outcomes, o)
		if *c.output == outputTable {
			result := "done"
			if !o.OK {
				result = "FAILED: " + o.Error
			}
			fmt.Fprintf(tw, "%s\t%s\n", id, result)
			_ = tw.Flush()
		}
	}
	if *c.output == outputJSON {
		if err := printJSON(report); err != nil {
			return err
		}
	} else {
		fmt.Printf("%s: %d of %d done, %d failed\n", report.Action, report.Succeeded, report.Matched, report.Failed)
	}
	switch {
	case report.Interrupted > 0:
		return exitCode{exitError, fmt.Sprintf("%s interrupted: %d of %d not attempted", report.Action, report.Interrupted, report.Matched)}
	case report.Failed > 0:
		return exitCode{exitError, fmt.Sprintf("%s failed for %d of %d", report.Action, report.Failed, report.Matched)}
	}
	return nil
}

// bulkTasks runs an operator's action on every task the filter selects:
// after listing them all, so that its own actions cannot move tasks in or
// out of the pages it reads.
func bulkTasks(ctx context.Context, c *common, f *taskFilter, action string, states []domain.TaskState, body []byte,
	skip func(*protocol.TaskView) bool) error {
	if err := checkOutput(*c.output); err != nil {
		return err
	}
	selected, err := selectTasks(ctx, c, f, states)
	if err != nil {
		return err
	}
	skipped := 0
	selected = slices.DeleteFunc(selected, func(t *protocol.TaskView) bool {
		if skip != nil && skip(t) {
			skipped++
			return true
		}
		return false
	})
	if skipped > 0 {
		fmt.Fprintf(os.Stderr, "sagactl: %d matching tasks are compensating already and cannot be cancelled; retry them instead\n", skipped)
	}
	report := bulkReport{Action: action, DryRun: f.dryRun, Matched: len(selected), Items: taskItems(selected)}
	if f.dryRun {
		if *c.output == outputJSON {
			return printJSON(report)
		}
		fmt.Printf("would %s %d tasks (dry run):\n", action, len(selected))
		return printTaskItems(report.Items.([]taskItem))
	}
	if len(selected) == 0 {
		fmt.Fprintf(os.Stderr, "sagactl: no task matches; nothing to %s\n", action)
		return nil
	}
	if err := confirm(f.yes, len(selected), action); err != nil {
		return err
	}
	ids := make([]string, len(selected))
	for i, t := range selected {
		ids[i] = t.ID
	}
	return runBulk(ctx, c, report, ids, func(i int) error {
		return call(ctx, http.MethodPost, c.api+"/api/tasks/"+url.PathEscape(ids[i])+"/"+action, body, nil)
	})
}

// taskItem is a task a bulk action selected, with -o json.
type taskItem struct {
	ID          string           `json:"id"`
	Workflow    string           `json:"workflow"`
	State       domain.TaskState `json:"state"`
	Step        string           `json:"step,omitempty"`
	Reason      string           `json:"reason,omitempty"`
	SubmittedAt time.Time        `json:"submittedAt"`
	UpdatedAt   time.Time        `json:"updatedAt"`
}

func printTaskItems(items []taskItem) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tWORKFLOW\tSTATE\tSTEP\tSUBMITTED\tUPDATED\tREASON")
	for _, t := range items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clean(t.ID), clean(t.Workflow), t.State, dash(clean(t.Step)), stamp(t.SubmittedAt), stamp(t.UpdatedAt),
			dash(truncate(t.Reason)))
	}
	return tw.Flush()
}

func taskItems(ts []*protocol.TaskView) []taskItem {
	out := make([]taskItem, len(ts))
	for i, t := range ts {
		out[i] = taskItem{ID: t.ID, Workflow: t.Workflow, State: t.State, Step: atStep(t), Reason: t.Reason, SubmittedAt: t.SubmittedAt,
			UpdatedAt: t.UpdatedAt}
	}
	return out
}

// overdueAttempt is an attempt past its completeBy, as overdue shows it.
type overdueAttempt struct {
	TaskID     string           `json:"taskId"`
	Workflow   string           `json:"workflow"`
	State      domain.TaskState `json:"state"`
	Step       string           `json:"step"`
	Action     string           `json:"action"`
	Agent      string           `json:"agent,omitempty"`
	Attempt    int              `json:"attempt"`
	LockedBy   string           `json:"lockedBy,omitempty"`
	CompleteBy time.Time        `json:"completeBy"`
	// OverdueSeconds is how long ago completeBy passed, by sagactl's clock.
	OverdueSeconds float64 `json:"overdueSeconds"`
}

// overdue lists the attempts in flight whose completeBy has passed, the
// oldest first: the supervisor times them out within its interval and
// grace, so one that stays here says the supervisor is not doing so.
func overdue(ctx context.Context, args []string) error {
	fs, c := flags("overdue")
	f := filterFlags(fs, false)
	atLeast := fs.Duration("at-least", 0, "only attempts overdue by at least this long")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errors.New("usage: sagactl overdue [flags]")
	}
	if err := checkOutput(*c.output); err != nil {
		return err
	}
	states, err := f.states("overdue", domain.StateProcessing, domain.StateCompensating)
	if err != nil {
		return err
	}
	limit := f.max
	f.max = 0
	tasks, err := selectTasks(ctx, c, f, states)
	if err != nil {
		return err
	}
	now := time.Now()
	var late []overdueAttempt
	for _, t := range tasks {
		for _, s := range t.Steps {
			if f.step != "" && s.Name != f.step {
				continue
			}
			for _, leg := range []struct {
				action string
				l      *protocol.LegView
			}{{protocol.ActionExecute, &s.LegView}, {protocol.ActionCompensate, s.Compensation}} {
				l := leg.l
				if l == nil || l.State != domain.StepStateProcessing || l.CompleteBy == nil {
					continue
				}
				if over := now.Sub(*l.CompleteBy); over > 0 && over >= *atLeast {
					late = append(late, overdueAttempt{TaskID: t.ID, Workflow: t.Workflow, State: t.State, Step: s.Name, Action: leg.action,
						Agent: s.Agent, Attempt: l.Attempt, LockedBy: l.LockedBy, CompleteBy: *l.CompleteBy, OverdueSeconds: over.Seconds()})
				}
			}
		}
	}
	slices.SortStableFunc(late, func(a, b overdueAttempt) int { return a.CompleteBy.Compare(b.CompleteBy) })
	if limit > 0 && len(late) > limit {
		late = late[:limit]
	}
	if *c.output == outputJSON {
		if late == nil {
			late = []overdueAttempt{}
		}
		return printJSON(late)
	}
	return printOverdue(os.Stdout, late)
}

func printOverdue(w io.Writer, late []overdueAttempt) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tWORKFLOW\tSTATE\tSTEP\tACTION\tAGENT\tATTEMPT\tLOCKED BY\tCOMPLETE BY\tOVERDUE BY")
	for _, a := range late {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", a.TaskID, a.Workflow, a.State, a.Step, a.Action, dash(a.Agent), a.Attempt,
			dash(a.LockedBy), stamp(a.CompleteBy), time.Duration(a.OverdueSeconds*float64(time.Second)).Round(time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d attempts past their completeBy (by this machine's clock)\n", len(late))
	return nil
}
