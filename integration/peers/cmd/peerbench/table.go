package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
)

// row is one run, from peerbench's JSON or sagabench's.
type row struct {
	Engine            string             `json:"engine"`
	Durability        string             `json:"durability"`
	Concurrency       int                `json:"concurrency"`
	OrdersPerSec      float64            `json:"ordersPerSecond"`
	LatencyMillis     map[string]float64 `json:"latencyMillis"`
	CPUMillisPerOrder float64            `json:"cpuMillisPerOrder"`
	Errors            int                `json:"errors"`
	// sagabench's fields
	Embedded   bool           `json:"embedded"`
	KafkaFsync bool           `json:"kafkaFsync"`
	SyncTopics string         `json:"kafkaSyncTopics"`
	Outcomes   map[string]int `json:"outcomes"`
	// Both: the windows of the run, the last full one the steady figure.
	Windows []struct {
		OrdersPerSec float64 `json:"ordersPerSecond"`
	} `json:"windows"`
	Steady *struct {
		Last                    int     `json:"lastWindow"`
		ThroughputLastOverFirst float64 `json:"throughputLastOverFirst"`
	} `json:"steady"`
}

// span is the range of a figure over the rounds.
type span struct{ lo, hi float64 }

func (s *span) add(v float64) {
	if s.lo == 0 && s.hi == 0 {
		s.lo, s.hi = v, v
		return
	}
	s.lo, s.hi = math.Min(s.lo, v), math.Max(s.hi, v)
}

func (s span) mid() float64 { return (s.lo + s.hi) / 2 }

func (s span) String() string {
	if s.lo == s.hi {
		return num(s.lo)
	}
	return num(s.lo) + " – " + num(s.hi)
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func ratio(saga, peer float64) string {
	if saga == 0 || peer == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", saga/peer)
}

type cell struct {
	rate, p50, p99, cpu span
	// last is the last full window's orders/s and decay last ÷ first,
	// when the run had windows.
	last, decay  span
	durability   string
	runs, errors int
}

// table reads JSON results and prints one markdown table: each engine's
// figures and, for peers, saga ÷ peer (from the middle of each range).
func table(w io.Writer, files []string) error {
	cells := map[int]map[string]*cell{}
	order := []string{"saga"}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r row
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if r.Engine == "" { // sagabench
			r.Engine = "saga"
			r.Durability = sagaDurability(r)
			for status, n := range r.Outcomes {
				if status != "processed" {
					r.Errors += n
				}
			}
		}
		if cells[r.Concurrency] == nil {
			cells[r.Concurrency] = map[string]*cell{}
		}
		c := cells[r.Concurrency][r.Engine]
		if c == nil {
			c = &cell{}
			cells[r.Concurrency][r.Engine] = c
			if !contains(order, r.Engine) {
				order = append(order, r.Engine)
			}
		}
		c.rate.add(r.OrdersPerSec)
		c.p50.add(r.LatencyMillis["p50"])
		c.p99.add(r.LatencyMillis["p99"])
		c.cpu.add(r.CPUMillisPerOrder)
		if st := r.Steady; st != nil && st.Last < len(r.Windows) {
			c.last.add(r.Windows[st.Last].OrdersPerSec)
			c.decay.add(st.ThroughputLastOverFirst)
		}
		c.durability, c.runs, c.errors = r.Durability, c.runs+1, c.errors+r.Errors
	}
	levels := make([]int, 0, len(cells))
	for l := range cells {
		levels = append(levels, l)
	}
	sort.Ints(levels)
	fmt.Fprintln(w, "| in flight | engine | orders/s | last window orders/s | last ÷ first window | p50 ms | p99 ms | CPU ms/order | saga ÷ peer: orders/s | last window | p50 | p99 | CPU/order | runs | durability |")
	fmt.Fprintln(w, "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	durabilities := map[string]string{}
	for _, l := range levels {
		saga := cells[l]["saga"]
		for _, name := range order {
			c := cells[l][name]
			if c == nil {
				continue
			}
			durabilities[name] = c.durability
			rr, rlast, r50, r99, rcpu := "", "", "", "", ""
			if name != "saga" && saga != nil {
				rr, rlast, r50, r99, rcpu = ratio(saga.rate.mid(), c.rate.mid()), ratio(saga.last.mid(), c.last.mid()), ratio(saga.p50.mid(), c.p50.mid()),
					ratio(saga.p99.mid(), c.p99.mid()), ratio(saga.cpu.mid(), c.cpu.mid())
			}
			last, decay := "–", "–"
			if c.last.hi > 0 {
				last, decay = c.last.String(), c.decay.String()
			}
			runs := fmt.Sprint(c.runs)
			if c.errors > 0 {
				runs += fmt.Sprintf(" (%d failed)", c.errors)
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l, name, c.rate, last, decay, c.p50, c.p99, c.cpu,
				rr, rlast, r50, r99, rcpu, runs, shortDurability(name))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "saga ÷ peer above 1 means saga is higher: better for orders/s, worse for latency and CPU. With several rounds, figures are ranges and ratios are between their middles.")
	fmt.Fprintln(w)
	for _, name := range order {
		if d, ok := durabilities[name]; ok {
			fmt.Fprintf(w, "- **%s**: %s\n", name, d)
		}
	}
	return nil
}

func shortDurability(engine string) string {
	switch engine {
	case "saga":
		return "event store fsync per append"
	case "dbos":
		return "PostgreSQL fsync + synchronous_commit on"
	case "restate":
		return "log-server WAL fsync on"
	case "dtm":
		return "BoltDB fsync per commit"
	case "temporal":
		return "SQLite file, synchronous=FULL"
	}
	return ""
}

func sagaDurability(r row) string {
	var b strings.Builder
	b.WriteString("sagabench defaults: the whole system embedded in one process, every event-store append fsynced (group commit); ")
	if r.KafkaFsync {
		b.WriteString("embedded Kafka fsyncs every batch")
	} else {
		fmt.Fprintf(&b, "embedded Kafka fsyncs the topics %s before it acknowledges them, and the others (statuses, commands, replies) without fsync, the statuses fsynced by the status publisher's sync barrier before it checkpoints past them", r.SyncTopics)
	}
	return b.String()
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
