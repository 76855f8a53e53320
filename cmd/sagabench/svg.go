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
	if lat == nil || lat.n == 0 {
		return `<svg xmlns="http://www.w3.org/2000/svg"/>`
	}
	lo, hi := math.Inf(1), 0.0
	for i, c := range lat.counts {
		if c > 0 {
			ms := float64(min(bucketValue(i), lat.max)) / float64(time.Millisecond)
			lo, hi = math.Min(lo, ms), math.Max(hi, ms)
		}
	}
	if hi <= 0 {
		return `<svg xmlns="http://www.w3.org/2000/svg"/>`
	}
	lo = math.Max(lo, 0.01)
	const buckets = 40
	minL, maxL := math.Log10(lo), math.Log10(hi)+1e-9
	counts := make([]int, buckets)
	for b, c := range lat.counts {
		if c == 0 {
			continue
		}
		ms := math.Max(float64(min(bucketValue(b), lat.max))/float64(time.Millisecond), lo)
		i := int((math.Log10(ms) - minL) / (maxL - minL) * buckets)
		counts[min(max(i, 0), buckets-1)] += int(c)
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

// timelineSVG draws the per-window figures over the run: throughput,
// latency, CPU per order and GC, and memory against the soft limit, so that
// a figure that decays with time shows as a slope.
func timelineSVG(r *Result) string {
	const w, panelH, left, right, top, gap = 760.0, 150.0, 70.0, 20.0, 40.0, 40.0
	ws := r.Windows
	type series struct {
		name  string
		color string
		value func(Window) float64
	}
	panels := []struct {
		title string
		lines []series
		limit float64
	}{
		{"orders/s", []series{{"orders/s", "#4a7fb5", func(x Window) float64 { return x.OrdersPerSec }}}, 0},
		{"latency ms", []series{{"p50", "#4a7fb5", func(x Window) float64 { return x.LatencyMillis["p50"] }},
			{"p99", "#c0392b", func(x Window) float64 { return x.LatencyMillis["p99"] }}}, 0},
		{"CPU ms/order, GC %", []series{{"cpu ms/order", "#4a7fb5", func(x Window) float64 { return x.CPUMillisPerOrder }},
			{"gc % / 10", "#c0392b", func(x Window) float64 { return x.GCPercent / 10 }}}, 0},
		{"memory MiB", []series{{"rss", "#4a7fb5", func(x Window) float64 { return x.RSSMiB }},
			{"live heap", "#27ae60", func(x Window) float64 { return x.HeapLiveMiB }}}, 0},
	}
	if r.Steady != nil {
		panels[3].limit = r.Steady.MemoryLimitMiB
	}
	h := top + float64(len(panels))*(panelH+gap) + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="14">saga over time: %d orders, %s, %d steps, %.0f s, windows of %s</text>`+"\n",
		left, r.Orders, paceOf(r), r.Steps, r.Seconds, windowLength(ws))
	if len(ws) == 0 {
		b.WriteString("</svg>\n")
		return b.String()
	}
	// The tail and stretches too short to read as a rate are not drawn.
	var shown []Window
	for _, win := range ws {
		if !win.Draining && win.EndSeconds-win.StartSeconds >= 0.5*(ws[0].EndSeconds-ws[0].StartSeconds) {
			shown = append(shown, win)
		}
	}
	end := ws[len(ws)-1].EndSeconds
	x := func(sec float64) float64 { return left + sec/end*(w-left-right) }
	for pi, p := range panels {
		y0 := top + float64(pi)*(panelH+gap) + 10
		peak := p.limit
		for _, s := range p.lines {
			for _, win := range shown {
				peak = math.Max(peak, s.value(win))
			}
		}
		if peak <= 0 {
			peak = 1
		}
		peak *= 1.1
		y := func(v float64) float64 { return y0 + panelH - v/peak*panelH }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", left, y0-4, p.title)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, y0+panelH, w-right, y0+panelH)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, y0, left, y0+panelH)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%s</text>`+"\n", left-4, y0+8, axisNumber(peak))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">0</text>`+"\n", left-4, y0+panelH)
		if p.limit > 0 {
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#888" stroke-dasharray="4 3"/><text x="%.0f" y="%.1f" fill="#888" text-anchor="end">soft limit %.0f</text>`+"\n",
				left, y(p.limit), w-right, y(p.limit), w-right, y(p.limit)-3, p.limit)
		}
		for si, s := range p.lines {
			var pts []string
			for _, win := range shown {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x((win.StartSeconds+win.EndSeconds)/2), y(s.value(win))))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s" text-anchor="end">%s</text>`+"\n", w-right-float64(len(p.lines)-1-si)*110, y0-4, s.color, s.name)
		}
	}
	axisY := top + float64(len(panels))*(panelH+gap) - gap + 28
	for _, sec := range timeTicks(end) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x(sec), axisY, (time.Duration(sec) * time.Second).String())
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func windowLength(ws []Window) string {
	if len(ws) == 0 {
		return "-"
	}
	return (time.Duration(ws[0].EndSeconds-ws[0].StartSeconds) * time.Second).Round(time.Second).String()
}

// timeTicks are about six round times from 0 to end seconds.
func timeTicks(end float64) []float64 {
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600} {
		step = s
		if end/s <= 8 {
			break
		}
	}
	var out []float64
	for t := 0.0; t <= end; t += step {
		out = append(out, t)
	}
	return out
}

// axisNumber writes an axis's top value: whole above 100, else 3 digits.
func axisNumber(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
