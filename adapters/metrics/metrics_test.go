package metrics_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/metrics"
	"github.com/sagaengine/saga/domain"
)

// TestWriteGivesWhatWasObserved observes each kind of measurement and reads
// the text output back with the Prometheus parser.
func TestWriteGivesWhatWasObserved(t *testing.T) {
	m := metrics.New()
	m.TaskFinished("order", domain.StateCompensated, 3*time.Second)
	m.TaskFinished("order", domain.StateError, time.Second)
	m.StepAnswered("payment", "execute", "failed", 40*time.Millisecond)
	m.AppendDone("conflict", time.Millisecond)
	count := 7
	m.Register(metrics.Family{Name: "saga_things_total", Help: "Things.", Type: prometheus.CounterValue, Labels: []string{"kind"},
		Read: func(emit func(float64, ...string)) { emit(float64(count), "big") }})
	count = 9 // read at scrape time, not at registration

	var out bytes.Buffer
	require.NoError(t, m.Write(&out))
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(&out)
	require.NoError(t, err)

	orders := families[metrics.OrderDuration].GetMetric()
	require.Len(t, orders, 2)
	outcomes := map[string]float64{}
	for _, o := range orders {
		for _, l := range o.GetLabel() {
			if l.GetName() == "outcome" {
				outcomes[l.GetValue()] = o.GetHistogram().GetSampleSum()
			}
		}
	}
	assert.Equal(t, map[string]float64{"compensated": 3, "failed": 1}, outcomes, "Error is the failed outcome")
	assert.Equal(t, uint64(1), families[metrics.StepDuration].GetMetric()[0].GetHistogram().GetSampleCount())
	assert.Equal(t, uint64(1), families[metrics.AppendDuration].GetMetric()[0].GetHistogram().GetSampleCount())
	assert.Equal(t, 9.0, families["saga_things_total"].GetMetric()[0].GetCounter().GetValue())
	assert.Contains(t, families, "go_goroutines")
}
