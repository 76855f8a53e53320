package console

import (
	"context"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The metrics the overview reads (adapters/metrics and adapters/engine
// name them; docs/operations.md lists them).
const (
	ordersTotal   = "saga_orders_total"
	orderDuration = "saga_order_duration_seconds"
	agentCommands = "saga_agent_commands_total"
	agentBreakers = "saga_agent_breaker_opened_total"
)

// Sampling: a sample every sampleEvery, kept for sampleWindow, so that the
// overview shows the last minutes without a time-series database.
const (
	sampleEvery  = 5 * time.Second
	sampleWindow = 10 * time.Minute
)

// sample is the counters of interest at one time.
type sample struct {
	at       time.Time
	accepted float64
	// finished counts orders by outcome; latency is the order duration
	// histogram over all outcomes.
	finished   map[string]float64
	latCount   float64
	latSum     float64
	latBuckets []bucket
	// agents counts commands by agent, then outcome; breakers the breaker
	// openings by agent.
	agents   map[string]map[string]float64
	breakers map[string]float64
}

type bucket struct{ upper, count float64 }

// sampler keeps the samples of the last sampleWindow. It is safe for
// concurrent use.
type sampler struct {
	gather prometheus.Gatherer
	now    func() time.Time
	mu     sync.Mutex
	kept   []sample
}

// run samples every sampleEvery until ctx ends.
func (s *sampler) run(ctx context.Context) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for {
		s.take()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// take records a sample now, dropping those older than the window.
func (s *sampler) take() {
	families, err := s.gather.Gather()
	if err != nil && len(families) == 0 {
		return
	}
	now := s.now()
	smp := sample{at: now, finished: map[string]float64{}, agents: map[string]map[string]float64{}, breakers: map[string]float64{}}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			label := func(name string) string {
				for _, l := range m.GetLabel() {
					if l.GetName() == name {
						return l.GetValue()
					}
				}
				return ""
			}
			switch f.GetName() {
			case ordersTotal:
				if label("outcome") == "accepted" {
					smp.accepted += m.GetCounter().GetValue()
				}
			case orderDuration:
				h := m.GetHistogram()
				smp.finished[label("outcome")] += float64(h.GetSampleCount())
				smp.latCount += float64(h.GetSampleCount())
				smp.latSum += h.GetSampleSum()
				smp.latBuckets = addBuckets(smp.latBuckets, h.GetBucket())
			case agentCommands:
				agent := label("agent")
				if smp.agents[agent] == nil {
					smp.agents[agent] = map[string]float64{}
				}
				smp.agents[agent][label("outcome")] += m.GetCounter().GetValue()
			case agentBreakers:
				smp.breakers[label("agent")] += m.GetCounter().GetValue()
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.kept); n > 1 && now.Sub(s.kept[n-1].at) < time.Second {
		s.kept[n-1] = smp // page views within a second share a sample
	} else {
		s.kept = append(s.kept, smp)
	}
	cut := 0
	for cut < len(s.kept)-1 && now.Sub(s.kept[cut].at) > sampleWindow {
		cut++
	}
	s.kept = slices.Delete(s.kept, 0, cut)
}

func addBuckets(into []bucket, add []*dto.Bucket) []bucket {
	if into == nil {
		into = make([]bucket, len(add))
		for i, b := range add {
			into[i].upper = b.GetUpperBound()
		}
	}
	for i, b := range add {
		if i < len(into) {
			into[i].count += float64(b.GetCumulativeCount())
		}
	}
	return into
}

// window is what happened between two samples.
type window struct {
	Label        string
	Seconds      float64
	OrdersPerSec float64
	Finished     map[string]float64
	MeanLatency  time.Duration
	P95Latency   time.Duration
	Agents       []agentRow
}

type agentRow struct {
	Agent    string
	Outcomes map[string]float64
	Breakers float64
}

// over compares the newest sample with the oldest one within d.
func (s *sampler) over(label string, d time.Duration) (window, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.kept) < 2 {
		return window{}, false
	}
	last := s.kept[len(s.kept)-1]
	first := s.kept[0]
	for _, k := range s.kept {
		if last.at.Sub(k.at) <= d {
			first = k
			break
		}
	}
	secs := last.at.Sub(first.at).Seconds()
	if secs <= 0 {
		return window{}, false
	}
	w := window{Label: label, Seconds: secs, OrdersPerSec: (last.accepted - first.accepted) / secs, Finished: map[string]float64{}}
	for outcome, n := range last.finished {
		w.Finished[outcome] = n - first.finished[outcome]
	}
	if n := last.latCount - first.latCount; n > 0 {
		w.MeanLatency = seconds((last.latSum - first.latSum) / n)
		w.P95Latency = seconds(quantile(0.95, last.latBuckets, first.latBuckets, n))
	}
	for agent, outcomes := range last.agents {
		row := agentRow{Agent: agent, Outcomes: map[string]float64{}, Breakers: last.breakers[agent] - first.breakers[agent]}
		for o, n := range outcomes {
			row.Outcomes[o] = n - first.agents[agent][o]
		}
		w.Agents = append(w.Agents, row)
	}
	slices.SortFunc(w.Agents, func(a, b agentRow) int { return strings.Compare(a.Agent, b.Agent) })
	return w, true
}

// quantile estimates the q-quantile of the observations between two
// cumulative histograms, interpolating within a bucket as Prometheus's
// histogram_quantile does.
func quantile(q float64, last, first []bucket, total float64) float64 {
	rank := q * total
	lower, below := 0.0, 0.0
	for i, b := range last {
		n := b.count
		if i < len(first) {
			n -= first[i].count
		}
		if n >= rank {
			if n == below {
				return b.upper
			}
			return lower + (b.upper-lower)*(rank-below)/(n-below)
		}
		lower, below = b.upper, n
	}
	return lower // above the highest bound: say the bound
}

func seconds(s float64) time.Duration {
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return 0
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

// series is the orders finished per sampling interval, oldest first, for
// the overview's bars.
func (s *sampler) series() (at []time.Time, finished []float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 1; i < len(s.kept); i++ {
		at = append(at, s.kept[i].at)
		finished = append(finished, s.kept[i].latCount-s.kept[i-1].latCount)
	}
	return at, finished
}

// seriesSVG draws the orders finished per interval as bars.
func seriesSVG(at []time.Time, finished []float64) template.HTML {
	const width, height = 600, 120
	var b strings.Builder
	peak := 1.0
	for _, n := range finished {
		peak = max(peak, n)
	}
	fmt.Fprintf(&b, `<svg class="series" viewBox="0 0 %d %d" role="img" aria-labelledby="series-title" xmlns="http://www.w3.org/2000/svg"><title id="series-title">Orders finished per interval, the last %d intervals, at most %.0f</title>`, width, height+16, len(finished), peak)
	if len(finished) > 0 {
		w := float64(width) / float64(len(finished))
		for i, n := range finished {
			h := float64(height) * n / peak
			fmt.Fprintf(&b, `<rect class="bar ok" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %.0f</title></rect>`,
				float64(i)*w, float64(height)-h, max(w-1, 1), h, at[i].UTC().Format("15:04:05"), n)
		}
	}
	fmt.Fprintf(&b, `<text class="axis" x="0" y="%d">older</text><text class="axis" x="%d" y="%d" text-anchor="end">now</text></svg>`, height+14, width, height+14)
	return template.HTML(b.String()) // nothing in it comes from outside
}

type overviewPage struct {
	Windows []window
	Series  template.HTML
	Error   string
}

func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	d := overviewPage{}
	if c.samples == nil {
		d.Error = "This process has no metrics to show."
		c.render(w, r, "overview.html", "Overview", d)
		return
	}
	c.samples.take()
	for _, span := range []struct {
		label string
		d     time.Duration
	}{{"last minute", time.Minute}, {"last 5 minutes", 5 * time.Minute}, {"last 10 minutes", 10 * time.Minute}} {
		if win, ok := c.samples.over(span.label, span.d); ok {
			d.Windows = append(d.Windows, win)
		}
	}
	d.Series = seriesSVG(c.samples.series())
	c.render(w, r, "overview.html", "Overview", d)
}
