package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
	"github.com/sagaengine/saga/projections"
)

// Statuses of an alert in sagactl alerts.
const (
	alertOpen     = "open"
	alertResolved = "resolved"
)

// alertRow is an alert raised for a task in Error and what became of it.
type alertRow struct {
	// Alert is the raised alert (made from the task view when Note says
	// so).
	protocol.Alert
	// Status is open or resolved.
	Status string `json:"status"`
	// Resolution is the resolved alert that resolved it, when one is on
	// the topic.
	Resolution *protocol.Alert `json:"resolution,omitempty"`
	// Note says when the row comes from the task view rather than the
	// alerts topic alone.
	Note string `json:"note,omitempty"`
}

// Notes of rows the task view completed.
const (
	noteLeftError = "the task left Error; no resolved alert on saga.alerts"
	noteNoAlert   = "task in Error with no alert on saga.alerts (raised within the supervisor's interval, or trimmed by retention)"
)

// alerts lists the alerts raised for tasks in Error, newest first, with
// whether they are open or were resolved.
func alerts(ctx context.Context, args []string) error {
	fs, c := flags("alerts")
	openOnly := fs.Bool("open", false, "only open alerts")
	sinceFlag := fs.String("since", "", "only alerts raised since this RFC 3339 time, or this long ago (e.g. 24h)")
	limit := fs.Int("limit", 100, "show the newest this many (0: all)")
	noView := fs.Bool("no-view", false, "use the alerts topic alone; do not check tasks in the task view")
	timeout := fs.Duration("timeout", 30*time.Second, "how long reading the alerts may take")
	if err := parseInterspersed(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errors.New("usage: sagactl alerts [flags]")
	}
	if err := checkOutput(*c.output); err != nil {
		return err
	}
	since, err := parseSince(*sinceFlag)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	raised := map[string]map[int64]protocol.Alert{} // by task, then revision
	resolved := map[string][]protocol.Alert{}
	unreadable := 0
	err = readTopic(ctx, c, protocol.AlertsTopic, since, func(r *kgo.Record) {
		a, err := protocol.ParseAlert(r.Value)
		switch {
		case err != nil:
			unreadable++
		case a.Kind == protocol.AlertRaised:
			if raised[a.TaskID] == nil {
				raised[a.TaskID] = map[int64]protocol.Alert{}
			}
			if _, seen := raised[a.TaskID][a.Revision]; !seen {
				raised[a.TaskID][a.Revision] = a
			}
		case a.Kind == protocol.AlertResolved:
			resolved[a.TaskID] = append(resolved[a.TaskID], a)
		}
	})
	if err != nil {
		return err
	}
	if unreadable > 0 {
		fmt.Fprintf(os.Stderr, "sagactl: passed over %d records of %s that are not alerts\n", unreadable, protocol.AlertsTopic)
	}
	rows := pairAlerts(raised, resolved)
	if !*noView {
		inError := map[string]*protocol.TaskView{}
		err := listTasks(ctx, c, projections.TaskQuery{State: domain.StateError}, func(t *protocol.TaskView) { inError[t.ID] = t })
		if err != nil {
			fmt.Fprintln(os.Stderr, "sagactl: alerts from the topic alone; the task view could not be read:", err)
		} else {
			rows = checkWithView(rows, inError, since)
		}
	}
	if *openOnly {
		rows = slices.DeleteFunc(rows, func(r alertRow) bool { return r.Status != alertOpen })
	}
	slices.SortStableFunc(rows, func(a, b alertRow) int { return b.At.Compare(a.At) })
	if *limit > 0 && len(rows) > *limit {
		rows = rows[:*limit]
	}
	if *c.output == outputJSON {
		if rows == nil {
			rows = []alertRow{}
		}
		return printJSON(rows)
	}
	return printAlerts(rows)
}

// pairAlerts makes a row of every raised alert, resolved by the first
// resolved alert of its task with a higher revision.
func pairAlerts(raised map[string]map[int64]protocol.Alert, resolved map[string][]protocol.Alert) []alertRow {
	var rows []alertRow
	for task, byRevision := range raised {
		for _, a := range byRevision {
			row := alertRow{Alert: a, Status: alertOpen}
			for i, r := range resolved[task] {
				if r.Resolves(a) && (row.Resolution == nil || r.Revision < row.Resolution.Revision) {
					row.Status, row.Resolution = alertResolved, &resolved[task][i]
				}
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// checkWithView corrects the topic with the task view: an open alert whose
// task is no longer in Error at that revision was resolved (its resolved
// alert is not on the topic: sagad runs without the status role, or the
// operator acted before the supervisor raised it), and a task in Error
// without an open alert gets one, from the view.
func checkWithView(rows []alertRow, inError map[string]*protocol.TaskView, since time.Time) []alertRow {
	covered := map[string]bool{}
	for i, r := range rows {
		if r.Status != alertOpen {
			continue
		}
		if t, ok := inError[r.TaskID]; ok && t.Revision == r.Revision {
			covered[r.TaskID] = true
			continue
		}
		rows[i].Status, rows[i].Note = alertResolved, noteLeftError
	}
	for id, t := range inError {
		if covered[id] || t.UpdatedAt.Before(since) {
			continue
		}
		rows = append(rows, alertRow{Alert: protocol.RaisedAlert(t.Task()), Status: alertOpen, Note: noteNoAlert})
	}
	return rows
}

func printAlerts(rows []alertRow) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tWORKFLOW\tSTEP\tRAISED\tSTATUS\tRESOLVED\tBY\tREASON")
	open := 0
	notes := map[string]bool{}
	for _, r := range rows {
		resolvedAt, by, status := "-", "-", r.Status
		if r.Resolution != nil {
			resolvedAt, by = stamp(r.Resolution.At), dash(r.Resolution.By)
		}
		if r.Status == alertOpen {
			open++
		}
		if r.Note != "" {
			status += "*"
			notes[r.Note] = true
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clean(r.TaskID), clean(r.Workflow), dash(clean(r.Step)), stamp(r.At), status, resolvedAt, clean(by),
			dash(truncate(r.Reason)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Printf("\n%d open, %d resolved\n", open, len(rows)-open)
	for _, note := range []string{noteLeftError, noteNoAlert} {
		if notes[note] {
			fmt.Println("*", note)
		}
	}
	return nil
}
