package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections"
)

// Bar is one attempt of a step or of its compensation on the timeline:
// from its dispatch to its outcome, or to the end of the history while it
// is in flight.
type Bar struct {
	Compensation bool
	Attempt      int
	From, To     time.Time
	// Outcome is "ok", "failed", "timeout" or "open".
	Outcome string
	Detail  string
}

// Mark is an instant on a lane: a retry scheduled, a compensation
// requested, an operator's action, the task's end.
type Mark struct {
	At     time.Time
	Kind   string
	Detail string
	// Until is, for a retry, when its backoff ends, and for a delay the
	// time it waits until: the wait is drawn as a dashed line from the
	// mark.
	Until time.Time
}

// Lane is one step's row of the timeline; the task's own lane has no step.
// Steps that run side by side have bars that overlap in time.
type Lane struct {
	Step  string
	Bars  []Bar
	Marks []Mark
	// Skipped says the step's condition was false: it never ran.
	Skipped bool
}

// Timeline is a task's history as swimlanes.
type Timeline struct {
	Start, End time.Time
	Lanes      []*Lane
}

// BuildTimeline lays out an audit's rows as swimlanes, a lane per step in
// the order steps first appear, after the task's own lane.
func BuildTimeline(rows []projections.AuditRow) Timeline {
	tl := Timeline{}
	if len(rows) == 0 {
		return tl
	}
	tl.Start, tl.End = rows[0].Time, rows[len(rows)-1].Time
	task := &Lane{}
	tl.Lanes = append(tl.Lanes, task)
	lanes := map[string]*Lane{}
	lane := func(step string) *Lane {
		if step == "" {
			return task
		}
		l, ok := lanes[step]
		if !ok {
			l = &Lane{Step: step}
			lanes[step] = l
			tl.Lanes = append(tl.Lanes, l)
		}
		return l
	}
	// open is the index of the lane's bar in flight, by step and side.
	type side struct {
		step string
		comp bool
	}
	open := map[side]int{}
	closeBar := func(r projections.AuditRow, comp bool, outcome string) {
		l := lane(r.Step)
		if i, ok := open[side{r.Step, comp}]; ok {
			l.Bars[i].To, l.Bars[i].Outcome = r.Time, outcome
			if r.Details != "" {
				l.Bars[i].Detail = r.Details
			}
			delete(open, side{r.Step, comp})
			return
		}
		l.Marks = append(l.Marks, Mark{At: r.Time, Kind: outcome, Detail: r.Event + " " + r.Details})
	}
	for _, r := range rows {
		switch r.Event {
		case domain.StepDispatchedType, domain.CompensationDispatchedType, domain.StepAwaitingType:
			// An await's wait is drawn as an attempt: from when it began
			// to the event or its deadline.
			comp := r.Event == domain.CompensationDispatchedType
			l := lane(r.Step)
			open[side{r.Step, comp}] = len(l.Bars)
			l.Bars = append(l.Bars, Bar{Compensation: comp, Attempt: r.Attempt, From: r.Time, To: tl.End, Outcome: "open", Detail: r.Details})
		case domain.StepSucceededType:
			closeBar(r, false, "ok")
		case domain.StepCompensatedType:
			closeBar(r, true, "ok")
		case domain.StepFailedType:
			closeBar(r, false, "failed")
		case domain.CompensationFailedType:
			closeBar(r, true, "failed")
		case domain.StepTimedOutType:
			closeBar(r, strings.HasPrefix(r.Details, "compensation"), "timeout")
		case domain.StepRetryScheduledType:
			m := Mark{At: r.Time, Kind: "retry", Detail: r.Details}
			if r.NotBefore != nil {
				m.Until = *r.NotBefore
				if m.Until.After(tl.End) {
					tl.End = m.Until // a wait that outlasts the history so far
				}
			}
			lane(r.Step).Marks = append(lane(r.Step).Marks, m)
		case domain.CompensationRequestedType:
			lane(r.Step).Marks = append(lane(r.Step).Marks, Mark{At: r.Time, Kind: "compensate", Detail: r.Details})
		case domain.StepDelayedType:
			m := Mark{At: r.Time, Kind: "delay", Detail: r.Details}
			if r.NotBefore != nil {
				m.Until = *r.NotBefore
				tl.End = maxTime(tl.End, m.Until)
			}
			lane(r.Step).Marks = append(lane(r.Step).Marks, m)
		case domain.StepSkippedType:
			l := lane(r.Step)
			l.Skipped = true
			l.Marks = append(l.Marks, Mark{At: r.Time, Kind: "skipped", Detail: r.Details})
		case domain.StepResubmittedType, domain.TaskCancelledType:
			lane(r.Step).Marks = append(lane(r.Step).Marks, Mark{At: r.Time, Kind: "operator", Detail: r.Event + " " + r.Details})
		default:
			task.Marks = append(task.Marks, Mark{At: r.Time, Kind: "task", Detail: r.Event + " " + r.Details})
		}
	}
	return tl
}

// The SVG's geometry, in user units; the picture scales to its box.
const (
	svgWidth   = 900
	labelWidth = 170
	laneHeight = 30
	axisHeight = 24
)

// SVG draws the timeline as an inline SVG picture: a lane per step, a bar
// per attempt (compensations lower and hatched by class), a tick per mark,
// each with a title that says what it is.
func (tl Timeline) SVG() template.HTML {
	var b strings.Builder
	span := tl.End.Sub(tl.Start)
	if span <= 0 {
		span = time.Millisecond
	}
	plot := float64(svgWidth - labelWidth - 10)
	x := func(t time.Time) float64 {
		return labelWidth + plot*float64(t.Sub(tl.Start))/float64(span)
	}
	height := axisHeight + laneHeight*len(tl.Lanes)
	fmt.Fprintf(&b, `<svg class="timeline" viewBox="0 0 %d %d" role="img" aria-labelledby="timeline-title" xmlns="http://www.w3.org/2000/svg">`, svgWidth, height)
	fmt.Fprintf(&b, `<title id="timeline-title">Timeline of %d lanes over %s</title>`, len(tl.Lanes), span.Round(time.Millisecond))
	for i := 0; i <= 4; i++ {
		at := tl.Start.Add(span * time.Duration(i) / 4)
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`, x(at), axisHeight-4, x(at), height)
		anchor := map[int]string{0: "start", 4: "end"}[i]
		if anchor == "" {
			anchor = "middle"
		}
		fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="14" text-anchor="%s">+%s</text>`, x(at), anchor, (span * time.Duration(i) / 4).Round(time.Millisecond))
	}
	for i, l := range tl.Lanes {
		y := axisHeight + i*laneHeight
		name := l.Step
		if name == "" {
			name = "task"
		}
		if l.Skipped {
			name += " (skipped)"
		}
		fmt.Fprintf(&b, `<g class="lane" data-step="%s"><text class="label" x="4" y="%d">%s</text>`, esc(name), y+19, esc(name))
		for _, bar := range l.Bars {
			cls, top, h := "bar "+bar.Outcome, y+4, 14
			what := "attempt"
			if bar.Compensation {
				cls, top, h, what = cls+" comp", y+18, 9, "compensation attempt"
			}
			w := max(x(bar.To)-x(bar.From), 2)
			fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%d" width="%.1f" height="%d"><title>%s %d: %s, %s. %s</title></rect>`,
				cls, x(bar.From), top, w, h, what, bar.Attempt, bar.Outcome, bar.To.Sub(bar.From).Round(time.Millisecond), esc(bar.Detail))
		}
		for _, m := range l.Marks {
			if m.Until.After(m.At) {
				what := "backoff"
				if m.Kind == "delay" {
					what = "waiting"
				}
				fmt.Fprintf(&b, `<line class="%s" x1="%.1f" y1="%d" x2="%.1f" y2="%d"><title>%s until +%s</title></line>`,
					what, x(m.At), y+14, x(m.Until), y+14, what, m.Until.Sub(tl.Start).Round(time.Millisecond))
			}
			fmt.Fprintf(&b, `<path class="mark %s" d="M%.1f %d l5 8 l-5 8 l-5 -8 z"><title>%s at +%s: %s</title></path>`,
				m.Kind, x(m.At), y+6, m.Kind, m.At.Sub(tl.Start).Round(time.Millisecond), esc(m.Detail))
		}
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // every text in it went through esc
}

func esc(s string) string { return template.HTMLEscapeString(s) }

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
