package eventstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
)

// BenchmarkAdapterAppend measures single-event appends through the adapter
// to the embedded server in the same process, fsync on, on both append
// paths, at several numbers of appenders. Each appender appends to a stream
// of its own with the exact expected revision, as saga's decisions do. Run:
//
//	go test -run '^$' -bench BenchmarkAdapterAppend -benchtime 40000x ./adapters/eventstore/
func BenchmarkAdapterAppend(b *testing.B) {
	for _, path := range []eventstore.AppendPath{eventstore.AppendPipelined, eventstore.AppendUnary} {
		for _, appenders := range []int{1, 16, 256} {
			b.Run(fmt.Sprintf("path=%s/appenders=%d", path, appenders), func(b *testing.B) {
				benchAppend(b, path, appenders)
			})
		}
	}
}

func benchAppend(b *testing.B, path eventstore.AppendPath, appenders int) {
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: b.TempDir(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	url := fmt.Sprintf("esdb://%s?tls=false", srv.Addr())
	if path == eventstore.AppendUnary {
		url += "&appendPath=unary"
	}
	s, err := eventstore.Dial(url, quietLogger())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	bg := context.Background()
	// Connect before the clock starts.
	if _, err := s.Append(bg, "warm-up", domain.ExpectAny(), domain.NewEvent{Type: "E", Data: []byte(`{}`)}); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"orderId":"o-1","step":"charge-payment","attempt":1}`)
	meta := domain.EventMetadata{CorrelationID: "o-1", CausationID: "m-1", Actor: "bench"}
	latencies := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	before := srv.Store().Stats()
	cpuBefore := cpuTime()
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < appenders; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("task-bench-%d-%s", w, uuid.NewString()[:8])
			expected := domain.ExpectNoStream()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				rev, err := s.Append(bg, name, expected, domain.NewEvent{Type: "StepDispatched", Data: payload, Metadata: meta})
				latencies[i] = time.Since(t0)
				if err != nil {
					b.Error(err)
					return
				}
				expected = domain.ExpectRevision(rev)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpuBefore
	b.StopTimer()
	if s.AppendPath() != path {
		b.Fatalf("appends went through %s, not %s", s.AppendPath(), path)
	}
	slices.Sort(latencies)
	st := srv.Store().Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
	b.ReportMetric(float64(st.Writes-before.Writes)/float64(max(1, st.Syncs-before.Syncs)), "appends/fsync")
	b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
	// CPU per append (client and server together) depends less on other
	// work on a shared machine than throughput does.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/append")
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
