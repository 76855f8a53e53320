package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/projections"
)

// auditTimestamp is how the audit's timeline prints a row's time.
const auditTimestamp = "2006-01-02T15:04:05.000Z07:00"

// parseCut reads audit's --at flag: a revision number or an RFC 3339 time;
// empty is no cut.
func parseCut(s string) (projections.Cut, error) {
	if s == "" {
		return projections.Cut{}, nil
	}
	var rev uint64
	if _, err := fmt.Sscanf(s, "%d", &rev); err == nil && fmt.Sprint(rev) == s {
		return projections.Cut{Revision: &rev}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return projections.Cut{}, errors.Newf("%q is neither a revision nor an RFC 3339 time", s)
	}
	return projections.Cut{Time: &t}, nil
}

// writeAuditText renders an audit as a timeline and a state table.
func writeAuditText(w io.Writer, a *projections.Audit) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Task %s, workflow %s: %d of %d events", clean(a.TaskID), clean(a.State.Workflow), len(a.Rows), a.Events)
	if a.Cut != nil && a.Cut.Revision != nil {
		fmt.Fprintf(&b, " (up to revision %d)", *a.Cut.Revision)
	}
	if a.Cut != nil && a.Cut.Time != nil {
		fmt.Fprintf(&b, " (up to %s)", a.Cut.Time.UTC().Format(time.RFC3339Nano))
	}
	b.WriteString("\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REV\tTIME\tELAPSED\tEVENT\tSTEP\tATTEMPT\tACTOR\tDETAILS")
	for _, r := range a.Rows {
		attempt := ""
		if r.Attempt > 0 {
			attempt = fmt.Sprint(r.Attempt)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Revision, r.Time.Format(auditTimestamp), r.Elapsed.Round(time.Millisecond),
			r.Event, clean(r.Step), attempt, clean(r.Actor), clean(r.Details))
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nState: %s", a.State.State)
	if a.State.Reason != "" {
		fmt.Fprintf(&b, " (%s)", clean(a.State.Reason))
	}
	b.WriteString("\n\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSTATE\tATTEMPT\tFAILURES\tLOCKED BY\tCOMPENSATION")
	for _, s := range a.State.Steps {
		comp := "-"
		if c := s.Compensation; c != nil {
			comp = fmt.Sprintf("%s, attempt %d, failures %d", c.State, c.Attempt, c.FailureCount)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", clean(s.Name), s.State, s.Attempt, s.FailureCount, dash(clean(s.LockedBy)), comp)
	}
	tw.Flush()
	if a.Drift != nil {
		if len(a.Drift) == 0 {
			b.WriteString("\nThe live view agrees with the replay.\n")
		} else {
			b.WriteString("\nDRIFT: the live view differs from the replay:\n")
			for _, d := range a.Drift {
				b.WriteString("  " + d + "\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
