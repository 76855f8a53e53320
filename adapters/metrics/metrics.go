// Package metrics keeps saga's metrics on the Prometheus client library:
// the latency histograms of orders, steps and event-store appends (it is
// the processes' Observer and the event store's AppendObserver), the lag
// of Kafka consumer groups, and the counters the processes already keep,
// read when scraped. adapters/engine builds one per running system and
// serves it at /metrics; docs/operations.md lists every metric.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package metrics

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// Names of the histograms and of the lag gauge.
const (
	OrderDuration  = "saga_order_duration_seconds"
	StepDuration   = "saga_step_duration_seconds"
	AppendDuration = "saga_eventstore_append_duration_seconds"
	ConsumerLag    = "saga_consumer_lag"
)

// Buckets of the histograms, in seconds. An order runs from milliseconds
// (every step answered at once) to minutes (retries, timeouts and
// compensations); a step is one remote call or several with backoff within
// its budget; an append is one fsynced write, milliseconds unless the
// store is overloaded.
var (
	OrderBuckets  = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	StepBuckets   = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	AppendBuckets = []float64{.0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512, 1, 2.5}
)

// Metrics is the metrics of one running system, on a registry of its own
// (so that several systems can run in one process). It is safe for
// concurrent use.
type Metrics struct {
	// Registry holds every metric; register more on it.
	Registry *prometheus.Registry

	orders, steps, appends *prometheus.HistogramVec
}

var _ processes.Observer = (*Metrics)(nil)

// New returns the histograms, with Go's runtime and the process's metrics
// (go_*, process_*), on a new registry.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		orders: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: OrderDuration,
			Help:    "Time from an order's submission to its final state (processed, compensated or failed: Error), by workflow; observed by the instance that recorded the final state.",
			Buckets: OrderBuckets}, []string{"workflow", "outcome"}),
		steps: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: StepDuration,
			Help:    "Time from an attempt's dispatch to the scheduler recording its agent's reply, by agent, action (execute, compensate) and outcome (succeeded, failed).",
			Buckets: StepBuckets}, []string{"agent", "action", "outcome"}),
		appends: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: AppendDuration,
			Help:    "Time of an append to the event store, retries included, by outcome (ok, conflict, refused, error).",
			Buckets: AppendBuckets}, []string{"outcome"}),
	}
	m.Registry.MustRegister(m.orders, m.steps, m.appends,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// TaskFinished implements processes.Observer.
func (m *Metrics) TaskFinished(workflow string, state domain.TaskState, took time.Duration) {
	m.orders.WithLabelValues(workflow, Outcome(state)).Observe(took.Seconds())
}

// StepAnswered implements processes.Observer.
func (m *Metrics) StepAnswered(agent, action, outcome string, took time.Duration) {
	m.steps.WithLabelValues(agent, action, outcome).Observe(took.Seconds())
}

// AppendDone observes an event-store append (an eventstore.AppendObserver).
func (m *Metrics) AppendDone(outcome string, took time.Duration) {
	m.appends.WithLabelValues(outcome).Observe(took.Seconds())
}

// Outcome is the outcome label of a final task state: the name of its
// final status (processed, compensated, failed).
func Outcome(state domain.TaskState) string {
	if state == domain.StateError {
		return "failed"
	}
	return strings.ToLower(string(state))
}

// Handler serves the metrics in the format the scraper asks for (the
// Prometheus text format by default).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// Write writes every metric in the Prometheus text format.
func (m *Metrics) Write(w io.Writer) error {
	families, err := m.Registry.Gather()
	if err != nil {
		return errors.Wrap(err, "gather metrics")
	}
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(w, f); err != nil {
			return errors.Wrap(err, "write metrics")
		}
	}
	return nil
}

// Family is a counter or gauge whose values something else keeps (the
// processes' Stats, say): read is called at every scrape and emits each
// sample with its label values, in the order of labels.
type Family struct {
	Name, Help string
	// Type is prometheus.CounterValue or prometheus.GaugeValue.
	Type   prometheus.ValueType
	Labels []string
	Read   func(emit func(value float64, labelValues ...string))
}

// Register adds families read at every scrape.
func (m *Metrics) Register(families ...Family) {
	for _, f := range families {
		m.Registry.MustRegister(&familyCollector{f: f, desc: prometheus.NewDesc(f.Name, f.Help, f.Labels, nil)})
	}
}

type familyCollector struct {
	f    Family
	desc *prometheus.Desc
}

func (c *familyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *familyCollector) Collect(ch chan<- prometheus.Metric) {
	c.f.Read(func(v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.desc, c.f.Type, v, labels...)
	})
}

// DefaultLagTimeout bounds how long a read of the broker (the consumer
// groups' lag, the agents' queues) may take; a scrape never waits for it
// longer than ScrapeWait.
const DefaultLagTimeout = 2 * time.Second

// ScrapeWait is how long a scrape waits for a read of the broker it
// started; past it, the scrape reports what the last read that finished
// gave, so that /metrics answers at once while the broker does not (a
// partition) and stays as fresh as the broker allows while it does.
var ScrapeWait = 250 * time.Millisecond

// cachedRead serves a read that asks a server from its last result: each
// scrape starts a read (unless one runs) and waits for it at most
// ScrapeWait. A read that fails forgets the last result, so that what the
// server cannot tell is left out rather than reported stale.
type cachedRead[T any] struct {
	read    func(context.Context) (T, error)
	mu      sync.Mutex
	last    T
	ok      bool
	running chan struct{}
}

// get returns the newest result, and whether there is one.
func (c *cachedRead[T]) get() (T, bool) {
	c.mu.Lock()
	done := c.running
	if done == nil {
		done = make(chan struct{})
		c.running = done
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), DefaultLagTimeout)
			v, err := c.read(ctx)
			cancel()
			c.mu.Lock()
			if err == nil {
				c.last, c.ok = v, true
			} else {
				var zero T
				c.last, c.ok = zero, false
			}
			c.running = nil
			c.mu.Unlock()
			close(done)
		}()
	}
	c.mu.Unlock()
	wait := time.NewTimer(ScrapeWait)
	defer wait.Stop()
	select {
	case <-done:
	case <-wait.C:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, c.ok
}

// WatchLag reports, at every scrape, the lag of the consumer groups
// groups returns (those this process consumes in): per group and topic,
// how many records are past the group's committed offsets, as the newest
// read of the broker told (cachedRead). A group the broker could not
// describe is left out. groups is called at every read, so groups that
// start later are followed; the slice it returns is not altered.
func (m *Metrics) WatchLag(admin *kadm.Client, groups func() []string) {
	lag := &cachedRead[kadm.DescribedGroupLags]{read: func(ctx context.Context) (kadm.DescribedGroupLags, error) {
		// kadm's Lag uses the names it is given as scratch space: once a
		// group it could not describe is dropped from that slice, the
		// caller's list would have lost the group for good.
		return admin.Lag(ctx, slices.Clone(groups())...)
	}}
	m.Register(Family{Name: ConsumerLag, Type: prometheus.GaugeValue, Labels: []string{"group", "topic"},
		Help: "Records not yet consumed (past the group's committed offset), by consumer group and topic, as the broker told at the newest read (a scrape waits for a read at most 250 ms).",
		Read: func(emit func(float64, ...string)) {
			if len(groups()) == 0 {
				return
			}
			lags, ok := lag.get()
			if !ok {
				return
			}
			for _, l := range lags.Sorted() {
				if l.Error() != nil {
					continue
				}
				for _, t := range l.Lag.TotalByTopic().Sorted() {
					emit(float64(t.Lag), l.Group, t.Topic)
				}
			}
		}})
}
