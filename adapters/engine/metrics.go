package engine

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/domain"
)

// sample is one value of a metric, with its labels.
type sample struct {
	labels string
	value  float64
}

func writeMetric(w io.Writer, name, kind, help string, samples ...sample) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
	for _, s := range samples {
		if s.labels != "" {
			fmt.Fprintf(w, "%s{%s} %g\n", name, s.labels, s.value)
		} else {
			fmt.Fprintf(w, "%s %g\n", name, s.value)
		}
	}
}

func label(k, v string) string { return k + `="` + strings.ReplaceAll(v, `"`, `\"`) + `"` }

// WriteMetrics writes the counters of every part this process runs in the
// Prometheus text format.
func (a *App) WriteMetrics(w io.Writer) {
	if s := a.Submitter; s != nil {
		st := s.Stats()
		writeMetric(w, "saga_orders_total", "counter", "Orders the submitter handled, by outcome.",
			sample{label("outcome", "accepted"), float64(st.Accepted)},
			sample{label("outcome", "duplicate"), float64(st.Duplicates)},
			sample{label("outcome", "dead_lettered"), float64(st.Rejected)})
	}
	if s := a.Scheduler; s != nil {
		st := s.Stats()
		writeMetric(w, "saga_commands_sent_total", "counter", "Commands the scheduler sent to agents, re-sends included.", sample{"", float64(st.Dispatched)})
		writeMetric(w, "saga_replies_total", "counter", "Agent replies the scheduler ignored: stale (not for the attempt in flight) or dead-lettered (invalid, unknown task or step).",
			sample{label("outcome", "stale"), float64(st.StaleReplies)},
			sample{label("outcome", "dead_lettered"), float64(st.RejectedReplies)})
		writeMetric(w, "saga_scheduler_conflicts_total", "counter", "Appends that lost to another writer and were decided again.", sample{"", float64(st.Conflicts)})
	}
	if s := a.Supervisor; s != nil {
		st := s.Stats()
		writeMetric(w, "saga_timeouts_total", "counter", "Attempts the supervisor recorded as timed out.", sample{"", float64(st.Timeouts)})
		writeMetric(w, "saga_alerts_total", "counter", "Alerts raised for tasks in Error.", sample{"", float64(st.Alerts)})
	}
	if len(a.AgentProcs) > 0 {
		names := make([]string, 0, len(a.AgentProcs))
		for n := range a.AgentProcs {
			names = append(names, n)
		}
		sort.Strings(names)
		var outcomes, retries, opened []sample
		for _, n := range names {
			ag := a.AgentProcs[n]
			st := ag.Stats()
			outcomes = append(outcomes,
				sample{label("agent", n) + "," + label("outcome", "succeeded"), float64(st.Succeeded)},
				sample{label("agent", n) + "," + label("outcome", "failed"), float64(st.Failed)},
				sample{label("agent", n) + "," + label("outcome", "expired"), float64(st.Expired)},
				sample{label("agent", n) + "," + label("outcome", "dead_lettered"), float64(st.Rejected)})
			retries = append(retries, sample{label("agent", n), float64(st.Retries)})
			if h := a.HTTPHandlers[n]; h != nil {
				opened = append(opened, sample{label("agent", n), float64(h.BreakersOpened())})
			} else {
				opened = append(opened, sample{label("agent", n), float64(st.BreakerOpened)})
			}
		}
		writeMetric(w, "saga_agent_commands_total", "counter", "Commands agents finished, by outcome; expired ones arrived or ended past their completeBy.", outcomes...)
		writeMetric(w, "saga_agent_retries_total", "counter", "Calls agents retried within a command's deadline.", retries...)
		writeMetric(w, "saga_agent_breaker_opened_total", "counter", "Times an agent's circuit breaker opened.", opened...)
	}
	if s := a.Status; s != nil {
		writeMetric(w, "saga_statuses_published_total", "counter", "Status messages sent, repeats after a restart included.", sample{"", float64(s.Published())})
		if p, ok := s.Sink.(*kafka.Producer); ok {
			writeMetric(w, "saga_statuses_undeliverable_total", "counter", "Statuses an order's reply topic refused; each was dead-lettered.", sample{"", float64(p.UndeliverableStatuses())})
		}
	}
	if f := a.followers; f != nil {
		st := f.Stats()
		writeMetric(w, "saga_followers_let_go_total", "counter", "Followers of the shared event subscription let go: detached (fell behind, follow on their own) or failed (handler error).",
			sample{label("reason", "detached"), float64(st.Detached)}, sample{label("reason", "failed"), float64(st.Failed)})
	}
	var failures []sample
	for _, c := range readinessChecks {
		failures = append(failures, sample{label("check", c), float64(readyFailures[c].Load())})
	}
	writeMetric(w, "saga_readiness_failures_total", "counter", "Readiness checks that failed, by check.", failures...)
	if t := a.Tasks; t != nil {
		var states []sample
		counts, _ := t.Counts(context.Background())
		keys := make([]string, 0, len(counts))
		for s := range counts {
			keys = append(keys, string(s))
		}
		sort.Strings(keys)
		for _, s := range keys {
			states = append(states, sample{label("state", s), float64(counts[domain.TaskState(s)])})
		}
		writeMetric(w, "saga_tasks", "gauge", "Tasks by state, in the projection.", states...)
	}
	if a.esServer != nil {
		st := a.esServer.Store().Stats()
		writeMetric(w, "saga_eventstore_fsyncs_total", "counter", "Group commits of the embedded event store.", sample{"", float64(st.Syncs)})
		writeMetric(w, "saga_eventstore_writes_total", "counter", "Writes the embedded event store made durable.", sample{"", float64(st.Writes)})
		writeMetric(w, "saga_eventstore_refused_writes_total", "counter", "Writes the embedded event store refused: disk full or after a disk failure.", sample{"", float64(st.Refused)})
	}
}

// TuneGC sets the garbage collector for a saga process unless GOGC is set:
// a target of 400 % trades memory (a few times the live heap, which is small)
// for about a third more throughput, measured with sagabench.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}
