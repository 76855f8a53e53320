package engine

import (
	"context"
	"io"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sagaengine/saga/adapters/kafka"
	"github.com/sagaengine/saga/adapters/metrics"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// counter and gauge are the two kinds of family the parts count.
const (
	counter = prometheus.CounterValue
	gauge   = prometheus.GaugeValue
)

// Held is what each process of the app holds in memory, by structure
// (processes.Held), and the embedded event store's caches of stream states
// and of compacted segments' position maps.
func (a *App) Held() map[string]processes.Held {
	out := map[string]processes.Held{}
	if a.Scheduler != nil {
		out["scheduler"] = a.Scheduler.Held()
	}
	if a.Supervisor != nil {
		out["supervisor"] = a.Supervisor.Held()
	}
	if a.Status != nil {
		out["status"] = a.Status.Held()
	}
	if a.Tasks != nil {
		out["taskview"] = a.Tasks.Held()
	}
	if a.esServer != nil {
		st := a.esServer.Store().Stats()
		out["eventstore"] = processes.Held{"stream_states": st.CachedStreams, "compact_map_runs": int(st.CompactMapRuns)}
	}
	return out
}

// registerMetrics adds to the app's metrics the counters of every part it
// runs, read from their Stats at each scrape, and the lag of the consumer
// groups it consumes in. Call it once every part is built.
func (a *App) registerMetrics() {
	m := a.Metrics
	if s := a.Submitter; s != nil {
		m.Register(metrics.Family{Name: "saga_orders_total", Type: counter, Labels: []string{"outcome"},
			Help: "Orders the submitter handled, by outcome.",
			Read: func(emit func(float64, ...string)) {
				st := s.Stats()
				emit(float64(st.Accepted), "accepted")
				emit(float64(st.Duplicates), "duplicate")
				emit(float64(st.Rejected), "dead_lettered")
			}})
	}
	if aw := a.Awaiter; aw != nil {
		m.Register(metrics.Family{Name: "saga_await_events_total", Type: counter, Labels: []string{"outcome"},
			Help: "Events on the topics of await steps: kept in an inbox, completing a waiting step (of those kept), or ignored (no await wants them).",
			Read: func(emit func(float64, ...string)) {
				st := aw.Stats()
				emit(float64(st.Kept), "kept")
				emit(float64(st.Completed), "completed")
				emit(float64(st.Ignored), "ignored")
			}})
	}
	if s := a.Scheduler; s != nil {
		m.Register(metrics.Family{Name: "saga_commands_sent_total", Type: counter,
			Help: "Commands the scheduler sent to agents, re-sends included.",
			Read: func(emit func(float64, ...string)) { emit(float64(s.Stats().Dispatched)) }},
			metrics.Family{Name: "saga_replies_total", Type: counter, Labels: []string{"outcome"},
				Help: "Agent replies the scheduler ignored: stale (not for the attempt in flight) or dead-lettered (invalid, unknown task or step).",
				Read: func(emit func(float64, ...string)) {
					st := s.Stats()
					emit(float64(st.StaleReplies), "stale")
					emit(float64(st.RejectedReplies), "dead_lettered")
				}},
			metrics.Family{Name: "saga_commands_in_process_total", Type: counter,
				Help: "Commands the scheduler handed to an agent instance of its own process, with no Kafka hop (part of saga_commands_sent_total).",
				Read: func(emit func(float64, ...string)) {
					if a.inProcess != nil {
						emit(float64(a.inProcess.Handed()))
					} else {
						emit(0)
					}
				}},
			metrics.Family{Name: "saga_scheduler_conflicts_total", Type: counter,
				Help: "Appends that lost to another writer and were decided again.",
				Read: func(emit func(float64, ...string)) { emit(float64(s.Stats().Conflicts)) }})
	}
	if s := a.Supervisor; s != nil {
		m.Register(metrics.Family{Name: "saga_timeouts_total", Type: counter,
			Help: "Attempts the supervisor recorded as timed out.",
			Read: func(emit func(float64, ...string)) { emit(float64(s.Stats().Timeouts)) }},
			metrics.Family{Name: "saga_alerts_total", Type: counter,
				Help: "Alerts raised for tasks in Error.",
				Read: func(emit func(float64, ...string)) { emit(float64(s.Stats().Alerts)) }},
			metrics.Family{Name: "saga_supervisor_lease_term", Type: gauge,
				Help: "The lease term (fencing token) this supervisor acts in; 0 while it does not lead.",
				Read: func(emit func(float64, ...string)) { emit(float64(s.Stats().LeaseTerm)) }},
			metrics.Family{Name: "saga_supervisor_stale_term_refusals_total", Type: counter,
				Help: "Timeouts and delays a task refused because a newer supervisor lease term had acted on it: an old leader fenced off.",
				Read: func(emit func(float64, ...string)) { emit(float64(s.Stats().StaleTerms)) }},
			metrics.Family{Name: "saga_supervisor_stand_downs_total", Type: counter,
				Help: "Times this supervisor gave up its lease because the event store did not answer.",
				Read: func(emit func(float64, ...string)) { emit(float64(s.Stats().StandDowns)) }},
			metrics.Family{Name: "saga_delays_elapsed_total", Type: counter,
				Help: "Delay steps whose time came, fired by this supervisor.",
				Read: func(emit func(float64, ...string)) { emit(float64(s.Stats().DelaysElapsed)) }})
	}
	if len(a.AgentProcs) > 0 {
		a.registerAgentMetrics(m)
	}
	if a.AgentDirectory != nil {
		a.registerDirectoryMetrics(m)
	}
	if s := a.Status; s != nil {
		m.Register(metrics.Family{Name: "saga_statuses_published_total", Type: counter,
			Help: "Status messages sent, repeats after a restart included.",
			Read: func(emit func(float64, ...string)) { emit(float64(s.Published())) }})
		m.Register(metrics.Family{Name: "saga_alerts_resolved_total", Type: counter,
			Help: "Resolved alerts sent for tasks an operator took out of Error, repeats after a restart included.",
			Read: func(emit func(float64, ...string)) { emit(float64(s.Resolved())) }})
		if p, ok := s.Sink.(*kafka.Producer); ok {
			m.Register(metrics.Family{Name: "saga_statuses_undeliverable_total", Type: counter,
				Help: "Statuses an order's reply topic refused; each was dead-lettered.",
				Read: func(emit func(float64, ...string)) { emit(float64(p.UndeliverableStatuses())) }})
		}
	}
	if f := a.followers; f != nil {
		m.Register(metrics.Family{Name: "saga_followers_let_go_total", Type: counter, Labels: []string{"reason"},
			Help: "Followers of the shared event subscription let go: detached (fell behind, follow on their own) or failed (handler error).",
			Read: func(emit func(float64, ...string)) {
				st := f.Stats()
				emit(float64(st.Detached), "detached")
				emit(float64(st.Failed), "failed")
			}})
	}
	m.Register(metrics.Family{Name: "saga_held_entries", Type: gauge, Labels: []string{"process", "structure"},
		Help: "Entries the processes hold in memory, by structure: bounded by the work in flight and fixed caps, never by the number of finished orders; a slope is a leak.",
		Read: func(emit func(float64, ...string)) {
			all := a.Held()
			for _, process := range slices.Sorted(maps.Keys(all)) {
				held := all[process]
				for _, structure := range held.Structures() {
					emit(float64(held[structure]), process, structure)
				}
			}
		}})
	m.Register(metrics.Family{Name: "saga_readiness_failures_total", Type: counter, Labels: []string{"check"},
		Help: "Readiness checks that failed, by check.",
		Read: func(emit func(float64, ...string)) {
			for _, c := range readinessChecks {
				emit(float64(readyFailures[c].Load()), c)
			}
		}})
	if t := a.Tasks; t != nil {
		m.Register(metrics.Family{Name: "saga_tasks", Type: gauge, Labels: []string{"state"},
			Help: "Tasks by state, in the projection.",
			Read: func(emit func(float64, ...string)) {
				counts, err := t.Counts(context.Background())
				if err != nil {
					return
				}
				// Every state, zero included, so that the family is there
				// before the view has its first task.
				states := []string{}
				for _, s := range []domain.TaskState{domain.StatePending, domain.StateProcessing, domain.StateProcessed, domain.StateError,
					domain.StateCompensating, domain.StateCompensated} {
					states = append(states, string(s))
				}
				for s := range counts {
					if !slices.Contains(states, string(s)) {
						states = append(states, string(s))
					}
				}
				sort.Strings(states)
				for _, s := range states {
					emit(float64(counts[domain.TaskState(s)]), s)
				}
			}})
	}
	if a.esServer != nil {
		store := a.esServer.Store()
		m.Register(metrics.Family{Name: "saga_eventstore_fsyncs_total", Type: counter,
			Help: "Group commits of the embedded event store.",
			Read: func(emit func(float64, ...string)) { emit(float64(store.Stats().Syncs)) }},
			metrics.Family{Name: "saga_eventstore_writes_total", Type: counter,
				Help: "Writes the embedded event store made durable.",
				Read: func(emit func(float64, ...string)) { emit(float64(store.Stats().Writes)) }},
			metrics.Family{Name: "saga_eventstore_refused_writes_total", Type: counter,
				Help: "Writes the embedded event store refused: disk full or after a disk failure.",
				Read: func(emit func(float64, ...string)) { emit(float64(store.Stats().Refused)) }})
	}
	if a.broker != nil {
		broker := a.broker
		m.Register(metrics.Family{Name: "saga_kafka_topics", Type: gauge,
			Help: "Topics the embedded Kafka holds; each costs file descriptors while it exists.",
			Read: func(emit func(float64, ...string)) { topics, _, _ := broker.TopicCapacity(); emit(float64(topics)) }},
			metrics.Family{Name: "saga_kafka_reply_topics_evicted_total", Type: counter,
				Help: "Reply topics the embedded Kafka auto-created for statuses and deleted, oldest first, to make room at its topic cap.",
				Read: func(emit func(float64, ...string)) { emit(float64(broker.EvictedTopics())) }},
			metrics.Family{Name: "saga_kafka_topic_creations_refused_total", Type: counter,
				Help: "Topic creations the embedded Kafka refused at its topic cap, with nothing it could delete to make room.",
				Read: func(emit func(float64, ...string)) { emit(float64(broker.RefusedTopics())) }})
	}
	if a.client != nil {
		// Asked at every read: agents and followers that start after the
		// metrics are registered add their groups.
		m.WatchLag(kadm.NewClient(a.client), a.consumerGroups)
	}
}

// registerAgentMetrics adds the counters of the agents the app runs.
func (a *App) registerAgentMetrics(m *metrics.Metrics) {
	names := make([]string, 0, len(a.AgentProcs))
	for n := range a.AgentProcs {
		names = append(names, n)
	}
	sort.Strings(names)
	each := func(sample func(name string, emit func(float64, ...string))) func(func(float64, ...string)) {
		return func(emit func(float64, ...string)) {
			for _, n := range names {
				sample(n, emit)
			}
		}
	}
	m.Register(metrics.Family{Name: "saga_agent_commands_total", Type: counter, Labels: []string{"agent", "outcome"},
		Help: "Commands agents finished, by outcome; unavailable ones were given back uncalled, expired ones arrived or ended past their completeBy.",
		Read: each(func(n string, emit func(float64, ...string)) {
			st := a.AgentProcs[n].Stats()
			emit(float64(st.Succeeded), n, "succeeded")
			emit(float64(st.Failed), n, "failed")
			emit(float64(st.Returned), n, "unavailable")
			emit(float64(st.Expired), n, "expired")
			emit(float64(st.Rejected), n, "dead_lettered")
		})},
		metrics.Family{Name: "saga_agent_retries_total", Type: counter, Labels: []string{"agent"},
			Help: "Calls agents retried within a command's deadline.",
			Read: each(func(n string, emit func(float64, ...string)) { emit(float64(a.AgentProcs[n].Stats().Retries), n) })},
		metrics.Family{Name: "saga_agent_tries_total", Type: counter, Labels: []string{"agent"},
			Help: "Calls agents made to their services.",
			Read: each(func(n string, emit func(float64, ...string)) { emit(float64(a.AgentProcs[n].Stats().Tries), n) })},
		metrics.Family{Name: "saga_agent_breaker_opened_total", Type: counter, Labels: []string{"agent"},
			Help: "Times an agent's circuit breaker opened.",
			Read: each(func(n string, emit func(float64, ...string)) {
				if h := a.HTTPHandlers[n]; h != nil {
					emit(float64(h.BreakersOpened()), n)
				} else {
					emit(float64(a.AgentProcs[n].Stats().BreakerOpened), n)
				}
			})})
}

// WriteMetrics writes every metric of this process in the Prometheus text
// format: the histograms, the counters of the parts it runs, the consumer
// groups' lag, and Go's runtime and process metrics.
func (a *App) WriteMetrics(w io.Writer) {
	if err := a.Metrics.Write(w); err != nil {
		a.logger.Warn("write metrics", "err", err.Error())
	}
}

// DefaultMemoryLimit is the soft memory limit TuneGC sets (unless
// GOMEMLIMIT is set).
const DefaultMemoryLimit = 300 << 20

// TuneGC sets the garbage collector for a saga process. Unless GOGC is set,
// a target of 400 % trades memory (a few times the live heap, which is small)
// for about a third more throughput, measured with sagabench. Unless
// GOMEMLIMIT is set, a soft limit of DefaultMemoryLimit bounds what that
// target may take: at 500 orders/s the live heap is about 60 MB, and the
// 400 % target let the heap reach 300 MB between collections, so RSS under
// load grew to 440 MiB; with the limit the collector runs sooner once the
// heap nears it (a collection costs about 1 % of the CPU at that rate). A
// process whose live heap outgrows the limit collects more often (the
// runtime caps that at about half the CPU): set GOMEMLIMIT higher for it.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(DefaultMemoryLimit)
	}
}
