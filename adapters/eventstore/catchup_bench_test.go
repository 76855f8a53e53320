package eventstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
)

// errEnough ends the benchmark's subscription once it has the backlog.
var errEnough = errors.New("enough")

// BenchmarkAdapterCatchUp measures how fast the adapter's SubscribeAll, as
// the engine reads $all, delivers a backlog of events with saga's metadata
// from the embedded server in the same process. Run:
//
//	go test -run '^$' -bench BenchmarkAdapterCatchUp -benchtime 3x ./adapters/eventstore/
func BenchmarkAdapterCatchUp(b *testing.B) {
	const backlog, perAppend = 200_000, 500
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: b.TempDir(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	s, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false", srv.Addr()), quietLogger())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	bg := context.Background()
	batch := make([]domain.NewEvent, perAppend)
	for i := range batch {
		batch[i] = domain.NewEvent{Type: "StepSucceeded", Data: []byte(`{"orderId":"o-1","step":"reserve-inventory"}`),
			Metadata: domain.EventMetadata{CorrelationID: "o-1", CausationID: "m-1", Actor: "bench"}}
	}
	for i := 0; i < backlog/perAppend; i++ {
		if _, err := s.Append(bg, fmt.Sprintf("task-%d", i), domain.ExpectAny(), batch...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	cpuBefore := cpuTime()
	for n := 0; n < b.N; n++ {
		got := 0
		err := s.SubscribeAll(bg, domain.FromStart(), "", func(item domain.SubscriptionItem) error {
			if item.Event != nil {
				if got++; got == backlog {
					return errEnough
				}
			}
			return nil
		})
		if !errors.Is(err, errEnough) {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(backlog*b.N)/time.Since(start).Seconds(), "events/s")
	b.ReportMetric(float64((cpuTime()-cpuBefore).Nanoseconds())/1000/float64(backlog*b.N), "cpu-us/event")
}
