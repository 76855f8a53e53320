package integration_test

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
)

// scrape reads url as Prometheus does and parses it with the Prometheus
// text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "the Prometheus text parser reads /metrics")
	return families
}

// labelsOf returns a sample's labels as a map.
func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// histogramCount sums the sample counts of a histogram family's series
// whose labels include want.
func histogramCount(f *dto.MetricFamily, want map[string]string) uint64 {
	var n uint64
	for _, m := range f.GetMetric() {
		labels := labelsOf(m)
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if match {
			n += m.GetHistogram().GetSampleCount()
		}
	}
	return n
}

// runMeteredOrders runs orders to their end, half of them compensated (the
// payment service refuses at random), on a system whose /metrics is also
// served on a listener of its own, and returns the system and the ids.
func runMeteredOrders(t *testing.T) (*system, []string) {
	s := startSystem(t, engine.Config{Workflows: []*domain.Workflow{fastWorkflow(2 * time.Second)}, MetricsListen: "127.0.0.1:0",
		Faults: map[string][]demo.Fault{"payment": {{Mode: demo.FaultPermanent, Rate: 0.5}}}})
	// 40 orders: both outcomes, all but certainly (2 in 2^40 runs would
	// see only one; with 12 it was 1 in 2,048, met once in 300 runs).
	ids := orderIDs("metered", 40)
	s.publishOrders(ids)
	s.awaitTerminal(ids, 60*time.Second)
	return s, ids
}

// TestMetricsEndpointServesHistograms parses /metrics of a running engine
// after orders ran, with the Prometheus text parser, and finds the
// histograms of order, step and append latency with samples, the consumer
// groups' lag, and the counters under their old names.
func TestMetricsEndpointServesHistograms(t *testing.T) {
	s, ids := runMeteredOrders(t)
	var families map[string]*dto.MetricFamily
	// The instance that recorded a final state observes it just after the
	// append the test saw.
	require.Eventually(t, func() bool {
		families = scrape(t, "http://"+s.app.HTTPAddr+"/metrics")
		f := families["saga_order_duration_seconds"]
		return f != nil && histogramCount(f, nil) == uint64(len(ids))
	}, 10*time.Second, 50*time.Millisecond, "one order latency per order")

	orders := families["saga_order_duration_seconds"]
	assert.Equal(t, dto.MetricType_HISTOGRAM, orders.GetType())
	assert.Positive(t, histogramCount(orders, map[string]string{"workflow": "order", "outcome": "processed"}))
	assert.Positive(t, histogramCount(orders, map[string]string{"workflow": "order", "outcome": "compensated"}))

	steps := families["saga_step_duration_seconds"]
	require.NotNil(t, steps)
	assert.Equal(t, dto.MetricType_HISTOGRAM, steps.GetType())
	assert.Equal(t, uint64(len(ids)), histogramCount(steps, map[string]string{"agent": "inventory", "action": "execute", "outcome": "succeeded"}))
	assert.Positive(t, histogramCount(steps, map[string]string{"agent": "payment", "action": "execute", "outcome": "failed"}))
	assert.Positive(t, histogramCount(steps, map[string]string{"agent": "inventory", "action": "compensate", "outcome": "succeeded"}))

	appends := families["saga_eventstore_append_duration_seconds"]
	require.NotNil(t, appends)
	assert.GreaterOrEqual(t, histogramCount(appends, map[string]string{"outcome": "ok"}), uint64(len(ids)), "at least one append per order")

	// The orders can end before every agent's consumer group has joined
	// (in process, commands reach the agents without Kafka), and a group
	// that has not joined yet, or is between assignments with nothing
	// committed, has no lag the broker can tell: wait for the groups.
	lagOf := func(families map[string]*dto.MetricFamily) map[string]bool {
		seen := map[string]bool{}
		lag := families["saga_consumer_lag"]
		if lag == nil {
			return seen
		}
		assert.Equal(t, dto.MetricType_GAUGE, lag.GetType())
		for _, m := range lag.GetMetric() {
			l := labelsOf(m)
			seen[l["group"]+" "+l["topic"]] = true
		}
		return seen
	}
	wantLag := []string{"saga-submitter orders", "saga-scheduler saga.replies", "saga-agent-inventory saga.cmd.inventory"}
	seen := lagOf(families)
	require.Eventually(t, func() bool {
		for _, want := range wantLag {
			if !seen[want] {
				seen = lagOf(scrape(t, "http://"+s.app.HTTPAddr+"/metrics"))
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the consumer groups' lag: %v", seen)

	accepted := families["saga_orders_total"]
	require.NotNil(t, accepted, "the counters keep their names")
	for _, m := range accepted.GetMetric() {
		if labelsOf(m)["outcome"] == "accepted" {
			assert.Equal(t, float64(len(ids)), m.GetCounter().GetValue())
		}
	}
	for _, name := range []string{"saga_commands_sent_total", "saga_agent_commands_total", "saga_tasks", "saga_readiness_failures_total",
		"saga_eventstore_writes_total", "saga_agent_heartbeats_total", "go_goroutines", "process_resident_memory_bytes"} {
		assert.Contains(t, families, name)
	}
	queued := families["saga_agent_queued"]
	require.NotNil(t, queued, "the agents' queued commands")
	bands := map[string]bool{}
	for _, m := range queued.GetMetric() {
		l := labelsOf(m)
		bands[l["agent"]+" "+l["priority"]] = true
	}
	for _, want := range []string{"inventory high", "payment normal", "shipping low"} {
		assert.True(t, bands[want], "queued of %s in %v", want, bands)
	}

	own := scrape(t, "http://"+s.app.MetricsAddr+"/metrics")
	assert.Contains(t, own, "saga_order_duration_seconds", "the metrics listener serves the same metrics")
}

// dashboardMetric finds the metric names a PromQL expression reads.
var dashboardMetric = regexp.MustCompile(`\b(?:saga|go|process)_[a-z_]+\b`)

// TestDashboardQueriesExportedMetrics keeps docs/grafana-dashboard.json
// true: every metric its panels query is one a running engine exports.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../docs/grafana-dashboard.json")
	require.NoError(t, err)
	var dashboard struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(raw, &dashboard))
	s, _ := runMeteredOrders(t)
	families := scrape(t, "http://"+s.app.HTTPAddr+"/metrics")

	type query struct{ where, expr string }
	var queries []query
	for _, p := range dashboard.Panels {
		for _, target := range p.Targets {
			queries = append(queries, query{"panel " + p.Title, target.Expr})
		}
	}
	for _, v := range dashboard.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			queries = append(queries, query{"variable " + v.Name, q})
		}
	}
	queried := 0
	for _, q := range queries {
		names := dashboardMetric.FindAllString(q.expr, -1)
		assert.NotEmpty(t, names, "%s queries no metric: %s", q.where, q.expr)
		for _, name := range names {
			family := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if f := strings.TrimSuffix(name, suffix); f != name && families[f].GetType() == dto.MetricType_HISTOGRAM {
					family = f
				}
			}
			assert.Contains(t, families, family, "%s queries %s, which the engine does not export", q.where, name)
			queried++
		}
	}
	assert.Greater(t, queried, 10, "the dashboard queries the engine's metrics")
}
