package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// histogramSVG draws the latency distribution on logarithmic buckets, with
// the percentiles marked.
func histogramSVG(r *Result) string {
	const w, h, left, bottom, top = 760.0, 380.0, 60.0, 50.0, 70.0
	lat := r.latencies
	lo, hi := math.Inf(1), 0.0
	for _, d := range lat {
		ms := float64(d) / float64(time.Millisecond)
		lo, hi = math.Min(lo, ms), math.Max(hi, ms)
	}
	if len(lat) == 0 || hi <= 0 {
		return `<svg xmlns="http://www.w3.org/2000/svg"/>`
	}
	lo = math.Max(lo, 0.01)
	const buckets = 40
	minL, maxL := math.Log10(lo), math.Log10(hi)+1e-9
	counts := make([]int, buckets)
	for _, d := range lat {
		ms := math.Max(float64(d)/float64(time.Millisecond), lo)
		i := int((math.Log10(ms) - minL) / (maxL - minL) * buckets)
		counts[min(max(i, 0), buckets-1)]++
	}
	peak := 0
	for _, c := range counts {
		peak = max(peak, c)
	}
	x := func(ms float64) float64 { return left + (math.Log10(ms)-minL)/(maxL-minL)*(w-left-20) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="14">saga end-to-end latency: %d orders, %s, %d steps, %.0f orders/s</text>`+"\n",
		left, r.Orders, paceOf(r), r.Steps, r.OrdersPerSec)
	barW := (w - left - 20) / buckets
	for i, c := range counts {
		if c == 0 {
			continue
		}
		bh := float64(c) / float64(peak) * (h - top - bottom)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4a7fb5"/>`+"\n", left+float64(i)*barW, h-bottom-bh, barW-1, bh)
	}
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, h-bottom, w-20, h-bottom)
	tick := func(ms float64, label string) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="black"/><text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n",
			x(ms), h-bottom, x(ms), h-bottom+5, x(ms), h-bottom+18, label)
	}
	tick(lo, fmt.Sprintf("%.3g", lo))
	tick(hi, fmt.Sprintf("%.3g", hi))
	for e := math.Floor(minL); e <= math.Ceil(maxL); e++ {
		for _, m := range []float64{1, 2, 3, 5, 7} {
			ms := m * math.Pow(10, e)
			// Skip ticks outside the range or crowding the end labels.
			if ms < lo || ms > hi || x(ms)-x(lo) < 30 || x(hi)-x(ms) < 30 {
				continue
			}
			tick(ms, fmt.Sprintf("%g", ms))
		}
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">latency, ms (log scale)</text>`+"\n", (w+left)/2, h-12)
	fmt.Fprintf(&b, `<text x="16" y="%.0f" transform="rotate(-90 16 %.0f)" text-anchor="middle">orders</text>`+"\n", (h-bottom+top)/2, (h-bottom+top)/2)
	for i, p := range []string{"p50", "p90", "p99"} {
		ms := r.LatencyMillis[p]
		if ms < lo || ms > hi {
			continue
		}
		labelY := top - 30 + float64(i)*12 // above the bars, one row each
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#c0392b" stroke-dasharray="4 3"/><text x="%.1f" y="%.0f" fill="#c0392b" text-anchor="middle">%s %.2f ms</text>`+"\n",
			x(ms), labelY+3, x(ms), h-bottom, x(ms), labelY, p, ms)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
