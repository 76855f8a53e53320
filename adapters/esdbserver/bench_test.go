package esdbserver_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// BenchmarkAppend measures single-event appends through the official client,
// fsync on, at several numbers of concurrent appenders. Run:
//
//	go test -run '^$' -bench BenchmarkAppend -benchtime 20000x ./adapters/esdbserver/
func BenchmarkAppend(b *testing.B) {
	for _, appenders := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("appenders=%d", appenders), func(b *testing.B) {
			t := &testing.T{}
			tg := &target{t: t, dir: b.TempDir()}
			tg.start()
			defer tg.stop()
			clients := []*esdb.Client{tg.client}
			for i := 1; i < benchClients(appenders); i++ {
				cl := connect(t, fmt.Sprintf("esdb://%s?tls=false", tg.server.Addr()))
				defer cl.Close()
				clients = append(clients, cl)
			}
			bg := context.Background()
			payload := []byte(`{"orderId":"o-1","step":"charge-payment","attempt":1}`)
			latencies := make([]time.Duration, b.N)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for w := 0; w < appenders; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					name := fmt.Sprintf("bench-%d-%s", w, uuid.NewString()[:8])
					c := clients[w%len(clients)]
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						t0 := time.Now()
						_, err := c.AppendToStream(bg, name, esdb.AppendToStreamOptions{},
							esdb.EventData{EventType: "StepDispatched", ContentType: esdb.ContentTypeJson, Data: payload})
						latencies[i] = time.Since(t0)
						if err != nil {
							b.Error(err)
							return
						}
					}
				}(w)
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			slices.Sort(latencies)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
			if tg.server != nil {
				st := tg.server.Store().Stats()
				b.ReportMetric(float64(st.Writes)/float64(max(1, st.Syncs)), "appends/fsync")
			}
			b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// BenchmarkCatchUpRead measures how fast a $all subscription from the start
// delivers a backlog through the official client. Run:
//
//	go test -run '^$' -bench BenchmarkCatchUpRead -benchtime 3x ./adapters/esdbserver/
func BenchmarkCatchUpRead(b *testing.B) {
	const backlog = 200_000
	t := &testing.T{}
	tg := &target{t: t, dir: b.TempDir()}
	tg.start()
	defer tg.stop()
	c := tg.client
	batch := make([]esdb.EventData, 500)
	for i := range batch {
		batch[i] = esdb.EventData{EventType: "StepSucceeded", ContentType: esdb.ContentTypeJson, Data: []byte(`{"orderId":"o-1","step":"reserve-inventory"}`)}
	}
	for i := 0; i < backlog/len(batch); i++ {
		_, err := c.AppendToStream(ctx(t), fmt.Sprintf("task-%d", i), esdb.AppendToStreamOptions{}, batch...)
		require.NoError(b, err)
	}
	b.ResetTimer()
	start := time.Now()
	cpuBefore := cpuTime()
	for n := 0; n < b.N; n++ {
		sub, err := c.SubscribeToAll(ctx(t), esdb.SubscribeToAllOptions{From: esdb.Start{}})
		require.NoError(b, err)
		got := 0
		for got < backlog {
			if ev := sub.Recv(); ev.EventAppeared != nil {
				got++
			} else if ev.SubscriptionDropped != nil {
				b.Fatal(ev.SubscriptionDropped.Error)
			}
		}
		_ = sub.Close()
	}
	b.ReportMetric(float64(backlog*b.N)/time.Since(start).Seconds(), "events/s")
	// CPU per event (client and server together) depends less on other
	// work on a shared machine than throughput does.
	b.ReportMetric(float64((cpuTime()-cpuBefore).Nanoseconds())/1000/float64(backlog*b.N), "cpu-us/event")
}

// benchClients is how many client connections the appenders share, from
// SAGA_BENCH_CLIENTS (default 1).
func benchClients(appenders int) int {
	n, err := strconv.Atoi(os.Getenv("SAGA_BENCH_CLIENTS"))
	if err != nil || n < 1 {
		return 1
	}
	return min(n, appenders)
}
