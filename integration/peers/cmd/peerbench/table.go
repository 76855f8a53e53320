package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Engine names of saga's two shapes in the table.
const (
	// sagaEngine is sagabench's default shape: commands and replies handed
	// over inside the process, the event store in process.
	sagaEngine = "saga"
	// sagaKafkaEngine is the mission's shape: commands and replies through
	// the embedded Kafka, the event store through gRPC
	// (--commands-through-kafka --eventstore-through-network).
	sagaKafkaEngine = "saga-kafka"
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
	Embedded             bool           `json:"embedded"`
	KafkaFsync           bool           `json:"kafkaFsync"`
	SyncTopics           string         `json:"kafkaSyncTopics"`
	CommandsThroughKafka bool           `json:"commandsThroughKafka"`
	StoreThroughNetwork  bool           `json:"eventStoreThroughNetwork"`
	Outcomes             map[string]int `json:"outcomes"`
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
	// steadyByRound is each round's steady orders/s (the last full
	// window's, else the whole run's), by the round the file name tells.
	steadyByRound map[int]float64
}

// roundOfFile reads the round from a result file named as run names them
// (ENGINE-cLEVEL-rROUND.json); 0 when the name tells none.
var roundOfFile = regexp.MustCompile(`-r([0-9]+)\.json$`)

func roundOf(path string) int {
	m := roundOfFile.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// pairedRatio compares saga with a peer round by round: each round's
// saga ÷ peer of steady orders/s, for the rounds both ran in. Runs of one
// round follow each other within minutes, so the machine's drift over a
// longer session (a fifth of the speed, both ways, on a shared host) falls
// mostly out of each ratio, where it stays in a ratio of ranges. It returns
// the median and the range of those ratios, and how many there are.
func pairedRatio(saga, peer map[int]float64) (median, lo, hi float64, n int) {
	var rs []float64
	for round, s := range saga {
		if p, ok := peer[round]; ok && round > 0 && s > 0 && p > 0 {
			rs = append(rs, s/p)
		}
	}
	if len(rs) == 0 {
		return 0, 0, 0, 0
	}
	sort.Float64s(rs)
	median = rs[len(rs)/2]
	if len(rs)%2 == 0 {
		median = (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
	}
	return median, rs[0], rs[len(rs)-1], len(rs)
}

// paired formats pairedRatio for the table: the median, then the range
// and the number of rounds when there are several.
func paired(saga, peer *cell) string {
	if saga == nil {
		return "–"
	}
	median, lo, hi, n := pairedRatio(saga.steadyByRound, peer.steadyByRound)
	switch n {
	case 0:
		return "–"
	case 1:
		return fmt.Sprintf("%.2f (1 round)", median)
	}
	return fmt.Sprintf("%.2f (%.2f – %.2f, %d rounds)", median, lo, hi, n)
}

// table reads JSON results and prints one markdown table: each engine's
// figures and, for peers, saga ÷ peer (from the middle of each range).
func table(w io.Writer, files []string) error {
	cells := map[int]map[string]*cell{}
	order := []string{sagaEngine}
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
			r.Engine = sagaEngine
			if r.CommandsThroughKafka {
				r.Engine = sagaKafkaEngine
			}
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
		steady := r.OrdersPerSec
		if st := r.Steady; st != nil && st.Last < len(r.Windows) {
			steady = r.Windows[st.Last].OrdersPerSec
			c.last.add(steady)
			c.decay.add(st.ThroughputLastOverFirst)
		}
		if round := roundOf(f); round > 0 {
			if c.steadyByRound == nil {
				c.steadyByRound = map[int]float64{}
			}
			c.steadyByRound[round] = steady
		}
		c.durability, c.runs, c.errors = r.Durability, c.runs+1, c.errors+r.Errors
	}
	levels := make([]int, 0, len(cells))
	for l := range cells {
		levels = append(levels, l)
	}
	sort.Ints(levels)
	fmt.Fprintln(w, "| in flight | engine | orders/s | last window orders/s | last ÷ first window | p50 ms | p99 ms | CPU ms/order | saga ÷ peer: orders/s | last window | last window, round by round | p50 | p99 | CPU/order | runs | durability |")
	fmt.Fprintln(w, "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	durabilities := map[string]string{}
	for _, l := range levels {
		saga := cells[l][sagaEngine]
		for _, name := range order {
			c := cells[l][name]
			if c == nil {
				continue
			}
			durabilities[name] = c.durability
			rr, rlast, rpaired, r50, r99, rcpu := "", "", "", "", "", ""
			if name != sagaEngine && saga != nil {
				rr, rlast, r50, r99, rcpu = ratio(saga.rate.mid(), c.rate.mid()), ratio(saga.last.mid(), c.last.mid()), ratio(saga.p50.mid(), c.p50.mid()),
					ratio(saga.p99.mid(), c.p99.mid()), ratio(saga.cpu.mid(), c.cpu.mid())
				rpaired = paired(saga, c)
			}
			last, decay := "–", "–"
			if c.last.hi > 0 {
				last, decay = c.last.String(), c.decay.String()
			}
			runs := fmt.Sprint(c.runs)
			if c.errors > 0 {
				runs += fmt.Sprintf(" (%d failed)", c.errors)
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l, name, c.rate, last, decay, c.p50, c.p99, c.cpu,
				rr, rlast, rpaired, r50, r99, rcpu, runs, shortDurability(name))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "saga ÷ peer above 1 means saga is higher: better for orders/s, worse for latency and CPU. With several rounds, figures are ranges and ratios are between their middles, except \"round by round\": the median (and range) of each round's saga ÷ peer, runs minutes apart, which the machine's drift over a session affects least.")
	if ranEngine(cells, sagaKafkaEngine) {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "saga-kafka is saga in the mission's shape, as a peer: its saga ÷ peer is in process ÷ through Kafka, so through Kafka ÷ in process is its inverse.")
	}
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
	case sagaEngine:
		return "event store fsync per append"
	case sagaKafkaEngine:
		return "as saga; commands and replies through Kafka, event store through gRPC"
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
	if r.CommandsThroughKafka {
		b.WriteString("commands and replies through the embedded Kafka (--commands-through-kafka); ")
	}
	if r.StoreThroughNetwork {
		b.WriteString("the engine's appends and subscription through gRPC on loopback (--eventstore-through-network); ")
	}
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

// ranEngine reports whether engine ran at any level.
func ranEngine(cells map[int]map[string]*cell, engine string) bool {
	for _, byEngine := range cells {
		if byEngine[engine] != nil {
			return true
		}
	}
	return false
}
