package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
)

// priorityMix is the share of orders of each priority (--priority-mix
// high=10,normal=60,low=30); empty means none are given one.
type priorityMix struct {
	weights map[domain.Priority]int
	total   int
}

// parsePriorityMix reads PRIORITY=WEIGHT pairs separated by commas.
func parsePriorityMix(s string) (priorityMix, error) {
	m := priorityMix{weights: map[domain.Priority]int{}}
	if s == "" {
		return m, nil
	}
	for _, part := range strings.Split(s, ",") {
		name, weight, ok := strings.Cut(strings.TrimSpace(part), "=")
		p, err := domain.ParsePriority(name)
		n, convErr := strconv.Atoi(weight)
		if !ok || name == "" || err != nil || convErr != nil || n < 0 {
			return m, errors.Newf("--priority-mix: %q is not PRIORITY=WEIGHT with a priority of high, normal or low", part)
		}
		m.weights[p] += n
		m.total += n
	}
	if m.total == 0 {
		return m, errors.New("--priority-mix: the weights add up to 0")
	}
	return m, nil
}

// of is the priority of order i: the orders are spread over the mix
// evenly, high first within each hundred, so that any run of orders has
// about the mix's shares. Empty when there is no mix.
func (m priorityMix) of(i int) domain.Priority {
	if m.total == 0 {
		return ""
	}
	slot := i % m.total
	for _, p := range domain.Priorities() {
		if slot < m.weights[p] {
			return p
		}
		slot -= m.weights[p]
	}
	return domain.PriorityNormal
}

// latencyByPriority gives the percentiles of each priority's latencies.
func latencyByPriority(byPriority map[domain.Priority]*histogram) map[domain.Priority]map[string]float64 {
	if len(byPriority) == 0 {
		return nil
	}
	out := map[domain.Priority]map[string]float64{}
	for p, h := range byPriority {
		out[p] = h.percentiles()
	}
	return out
}

func reportByPriority(w io.Writer, r *Result) {
	for _, p := range domain.Priorities() {
		if l, ok := r.LatencyByPriority[p]; ok {
			fmt.Fprintf(w, "  %-6s latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", p, l["p50"], l["p90"], l["p99"], l["max"])
		}
	}
}
