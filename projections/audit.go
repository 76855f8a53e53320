package projections

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// Cut limits an audit to a point in a task's history: up to and including
// a revision, or up to a time. The zero Cut is the whole history.
type Cut struct {
	Revision *uint64
	Time     *time.Time
}

func (c Cut) includes(e domain.RecordedEvent) bool {
	switch {
	case c.Revision != nil:
		return e.Revision <= *c.Revision
	case c.Time != nil:
		return !e.Recorded.After(*c.Time)
	}
	return true
}

// AuditRow is one event of a task's timeline.
type AuditRow struct {
	Revision uint64        `json:"revision"`
	Time     time.Time     `json:"time"`
	Elapsed  time.Duration `json:"elapsedNanos"`
	Event    string        `json:"event"`
	Step     string        `json:"step,omitempty"`
	Attempt  int           `json:"attempt,omitempty"`
	Actor    string        `json:"actor"`
	Details  string        `json:"details,omitempty"`
	// NotBefore is, for a retry scheduled, when its backoff ends; for a
	// delay step that started, the time it waits until.
	NotBefore *time.Time `json:"notBefore,omitempty"`
}

// Audit is a task's history replayed from its stream: the timeline and the
// state it folds to, as the API would show it.
type Audit struct {
	TaskID string `json:"taskId"`
	// Events is how many events the stream holds; Rows how many the cut kept.
	Events int                `json:"events"`
	Rows   []AuditRow         `json:"timeline"`
	State  *protocol.TaskView `json:"state"`
	Drift  []string           `json:"drift,omitempty"`
	Cut    *cutSummary        `json:"cut,omitempty"`
}

type cutSummary struct {
	Revision *uint64    `json:"revision,omitempty"`
	Time     *time.Time `json:"time,omitempty"`
}

// BuildAudit replays a task's recorded events up to cut, with the one fold
// of stored events: an event it cannot read fails the audit, and a history
// whose start expired (its workflow's retention) is domain.ErrTaskExpired.
func BuildAudit(taskID string, recorded []domain.RecordedEvent, cut Cut) (*Audit, error) {
	if len(recorded) == 0 {
		return nil, errors.Wrapf(domain.ErrTaskNotFound, "%q", taskID)
	}
	if domain.HistoryExpired(recorded) {
		return nil, domain.TaskExpiredError(taskID, recorded[0].Revision)
	}
	a := &Audit{TaskID: taskID, Events: len(recorded)}
	state := domain.NewTask(taskID)
	if cut.Revision != nil || cut.Time != nil {
		a.Cut = &cutSummary{Revision: cut.Revision, Time: cut.Time}
	}
	start := recorded[0].Recorded
	for _, r := range recorded {
		if !cut.includes(r) {
			break
		}
		ev, err := state.ApplyRecorded(&r)
		if err != nil {
			return nil, err
		}
		step, attempt, details := describe(ev)
		row := AuditRow{Revision: r.Revision, Time: r.Recorded.UTC(), Elapsed: r.Recorded.Sub(start),
			Event: r.Type, Step: step, Attempt: attempt, Actor: r.Metadata.Actor, Details: details}
		if retry, ok := ev.(domain.StepRetryScheduled); ok {
			notBefore := retry.NotBefore.UTC()
			row.NotBefore = &notBefore
		}
		if delayed, ok := ev.(domain.StepDelayed); ok {
			until := delayed.Until.UTC()
			row.NotBefore = &until
		}
		a.Rows = append(a.Rows, row)
	}
	a.State = protocol.ViewOf(state)
	return a, nil
}

const stamp = "15:04:05.000"

// describe picks the step, attempt and a line of details for an event.
func describe(e domain.Event) (string, int, string) {
	switch e := e.(type) {
	case domain.TaskSubmitted:
		d := "workflow " + e.Workflow + " v" + strconv.Itoa(max(e.WorkflowVersion, 1)) + "; steps " + strings.Join(e.Steps, ", ")
		if e.ReplyTo != "" {
			d += "; replyTo " + e.ReplyTo
		}
		if e.Priority != "" {
			d += "; priority " + string(e.Priority)
		}
		return "", 0, d
	case domain.StepDispatched:
		return e.Step, e.Attempt, "to " + e.Agent + ", completeBy " + e.CompleteBy.UTC().Format(stamp) + ", key " + e.IdempotencyKey
	case domain.StepSucceeded:
		if len(e.Result) > 0 {
			return e.Step, e.Attempt, withAnswer("result "+clip(string(e.Result), 200), e.Answer)
		}
		return e.Step, e.Attempt, withAnswer("", e.Answer)
	case domain.StepFailed:
		return e.Step, e.Attempt, withAnswer(string(e.Failure)+": "+e.Reason, e.Answer)
	case domain.StepWaiting:
		what := "step"
		if e.Compensation {
			what = "compensation"
		}
		return e.Step, 0, what + " waits for " + e.Agent + ": " + e.Reason
	case domain.StepAwaiting:
		return e.Step, e.Attempt, "awaits an event on " + e.Topic + " for " + e.Value + " until " + e.Until.UTC().Format(stamp)
	case domain.StepSkipped:
		return e.Step, 0, "skipped: condition " + e.Condition + " is false"
	case domain.StepDelayed:
		return e.Step, 0, "waiting until " + e.Until.UTC().Format(time.RFC3339)
	case domain.StepDelayElapsed:
		d := "delay over (until " + e.Until.UTC().Format(time.RFC3339) + ")"
		if e.FiredBy != "" {
			d += ", fired by " + e.FiredBy
		}
		if e.LeaseTerm > 0 {
			d += " in lease term " + strconv.FormatInt(e.LeaseTerm, 10)
		}
		return e.Step, 0, d
	case domain.StepReturned:
		what := "attempt"
		if e.Compensation {
			what = "compensation attempt"
		}
		by := ""
		if e.Instance != "" {
			by = " by " + e.Instance
		}
		return e.Step, e.Attempt, what + " given back" + by + " without a call, not counted: " + e.Reason
	case domain.StepTimedOut:
		what := "step"
		if e.Compensation {
			what = "compensation"
		}
		detail := fmt.Sprintf("%s past completeBy %s; failure %d; detected by %s", what, e.CompleteBy.UTC().Format(stamp), e.FailureCount, e.DetectedBy)
		if e.LeaseTerm > 0 {
			detail += fmt.Sprintf(" in lease term %d", e.LeaseTerm)
		}
		return e.Step, e.Attempt, detail
	case domain.StepRetryScheduled:
		what := "attempt"
		if e.Compensation {
			what = "compensation attempt"
		}
		return e.Step, e.Attempt, fmt.Sprintf("%s %d not before %s", what, e.Attempt, e.NotBefore.UTC().Format(stamp))
	case domain.CompensationRequested:
		return e.Step, 0, e.Reason
	case domain.CompensationDispatched:
		key := e.IdempotencyKey
		if key == "" {
			key = domain.CompensationKey(e.TaskID, e.Step)
		}
		return e.Step, e.Attempt, e.Action + " to " + e.Agent + ", completeBy " + e.CompleteBy.UTC().Format(stamp) + ", key " + key
	case domain.StepCompensated:
		return e.Step, e.Attempt, withAnswer("", e.Answer)
	case domain.CompensationFailed:
		return e.Step, e.Attempt, withAnswer(string(e.Failure)+": "+e.Reason, e.Answer)
	case domain.StepResubmitted:
		what := "step"
		if e.Compensation {
			what = "compensation"
		}
		return e.Step, 0, what + " resubmitted by " + e.By
	case domain.TaskCancelled:
		return "", 0, strings.TrimSuffix("by "+e.By+": "+e.Reason, ": ")
	case domain.TaskFailed:
		return e.Step, 0, e.Reason
	case domain.TaskProcessed, domain.TaskCompensated:
		return "", 0, "" // the event's name says it all
	}
	return "", 0, ""
}

// withAnswer adds to d what the agent said of itself: how many calls the
// attempt made and which instance answered.
func withAnswer(d string, a domain.Answer) string {
	var parts []string
	if a.Tries > 0 {
		parts = append(parts, strconv.Itoa(a.Tries)+" "+plural(a.Tries, "try", "tries"))
	}
	if a.Instance != "" {
		parts = append(parts, "by "+a.Instance)
	}
	if len(parts) == 0 {
		return d
	}
	return strings.TrimPrefix(d+"; "+strings.Join(parts, ", "), "; ")
}

// plural is one or many, as n says.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// clip shortens s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return domain.CutUTF8(s, n) + "…"
}

// CompareWith records where a live view of the task (the projection the API
// serves) differs from the replayed state.
func (a *Audit) CompareWith(live *protocol.TaskView) {
	a.Drift = Drift(a.State, live)
}

// Drift lists the differences between two views of a task, as
// "field: replayed != live", field by field of what the API shows.
func Drift(replayed, live *protocol.TaskView) []string {
	flat := func(t *protocol.TaskView) map[string]any {
		var m map[string]any
		b, _ := json.Marshal(t)
		_ = json.Unmarshal(b, &m)
		out := map[string]any{}
		flatten("", m, out)
		return out
	}
	r, l := flat(replayed), flat(live)
	keys := map[string]bool{}
	for k := range r {
		keys[k] = true
	}
	for k := range l {
		keys[k] = true
	}
	out := []string{} // empty, not nil: compared and found equal
	for k := range keys {
		if fmt.Sprint(r[k]) != fmt.Sprint(l[k]) {
			out = append(out, fmt.Sprintf("%s: replayed %v, live %v", k, show(r[k]), show(l[k])))
		}
	}
	sort.Strings(out)
	return out
}

func show(v any) any {
	if v == nil {
		return "(none)"
	}
	return v
}

func flatten(prefix string, v any, out map[string]any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			flatten(strings.TrimPrefix(prefix+"."+k, "."), x, out)
		}
	case []any:
		for i, x := range v {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), x, out)
		}
	default:
		out[prefix] = v
	}
}
