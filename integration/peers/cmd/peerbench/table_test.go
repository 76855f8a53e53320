package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPairedRatioTakesTheMedianOfEachRoundsRatio(t *testing.T) {
	saga := map[int]float64{1: 2000, 2: 1500, 3: 1800, 4: 1000}
	// Round 4 has no peer run and round 0 (no round in the name) is never
	// paired.
	peer := map[int]float64{1: 1000, 2: 1000, 3: 1000, 0: 100}
	median, lo, hi, n := pairedRatio(saga, peer)
	if n != 3 || median != 1.8 || lo != 1.5 || hi != 2 {
		t.Fatalf("paired ratio: median %v, range %v-%v over %d rounds; want 1.8, 1.5-2 over 3", median, lo, hi, n)
	}
	saga[4], peer[4] = 1000, 1000
	if median, _, _, n = pairedRatio(saga, peer); n != 4 || median != (1.5+1.8)/2 {
		t.Fatalf("even count: median %v over %d rounds; want the mean of the middle two, 1.65, over 4", median, n)
	}
	if _, _, _, n = pairedRatio(saga, nil); n != 0 {
		t.Fatalf("no peer runs: %d rounds paired", n)
	}
}

func TestRoundOfReadsTheRoundFromTheFileName(t *testing.T) {
	for name, want := range map[string]int{
		"/x/saga-c256-r3.json":       3,
		"saga-kafka-c64-r12.json":    12,
		"dbos-c1.json":               0,
		"/x/r4/saga-c256-r.json":     0,
		"/x/dbos-c256-r2.json.other": 0,
	} {
		if got := roundOf(name); got != want {
			t.Errorf("roundOf(%q) = %d, want %d", name, got, want)
		}
	}
}

// TestTablePairsSagaKafkaAndPeersRoundByRound writes the files run writes
// for two rounds, the machine slower in the second, and checks the table
// pairs each engine with saga round by round, apart from the ratio of the
// ranges' middles.
func TestTablePairsSagaKafkaAndPeersRoundByRound(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	sagabench := func(rate float64, throughKafka bool) string {
		return fmt.Sprintf(`{"concurrency":256,"ordersPerSecond":%g,"latencyMillis":{"p50":100,"p99":200},"cpuMillisPerOrder":1,
			"embedded":true,"commandsThroughKafka":%t,"eventStoreThroughNetwork":%t,"outcomes":{"processed":10},
			"windows":[{"ordersPerSecond":%g},{"ordersPerSecond":%g}],"steady":{"lastWindow":1,"throughputLastOverFirst":1}}`,
			rate, throughKafka, throughKafka, rate, rate)
	}
	peerbench := func(rate float64) string {
		return fmt.Sprintf(`{"engine":"dbos","durability":"PostgreSQL","concurrency":256,"ordersPerSecond":%g,
			"latencyMillis":{"p50":300,"p99":400},"cpuMillisPerOrder":2,"windows":[{"ordersPerSecond":%g},{"ordersPerSecond":%g}],
			"steady":{"lastWindow":1,"throughputLastOverFirst":1}}`, rate, rate, rate)
	}
	files := []string{
		write("saga-c256-r1.json", sagabench(2000, false)),
		write("saga-kafka-c256-r1.json", sagabench(1500, true)),
		write("dbos-c256-r1.json", peerbench(1000)),
		write("saga-c256-r2.json", sagabench(1000, false)),
		write("saga-kafka-c256-r2.json", sagabench(800, true)),
		write("dbos-c256-r2.json", peerbench(400)),
	}
	var out bytes.Buffer
	if err := table(&out, files); err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		cols := strings.Split(line, "|")
		if len(cols) > 11 && strings.TrimSpace(cols[1]) == "256" {
			rows[strings.TrimSpace(cols[2])] = cols
		}
	}
	if len(rows) != 3 {
		t.Fatalf("want rows for saga, saga-kafka and dbos, got %v in\n%s", rows, out.String())
	}
	// Columns: 9 saga ÷ peer orders/s (the ranges' middles), 11 round by
	// round (2000/1500 and 1000/800; 2000/1000 and 1000/400).
	for engine, want := range map[string][2]string{"saga-kafka": {"1.30", "1.29 (1.25 – 1.33, 2 rounds)"}, "dbos": {"2.14", "2.25 (2.00 – 2.50, 2 rounds)"}} {
		if got := strings.TrimSpace(rows[engine][9]); got != want[0] {
			t.Errorf("%s ratio of middles: %q, want %q", engine, got, want[0])
		}
		if got := strings.TrimSpace(rows[engine][11]); got != want[1] {
			t.Errorf("%s round by round: %q, want %q", engine, got, want[1])
		}
	}
	if got := strings.TrimSpace(rows["saga"][11]); got != "" {
		t.Errorf("saga has a ratio to itself: %q", got)
	}
	if !strings.Contains(out.String(), "commands and replies through the embedded Kafka") {
		t.Errorf("saga-kafka's durability line does not say what it runs:\n%s", out.String())
	}
}
