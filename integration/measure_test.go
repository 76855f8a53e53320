package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/esdbserver"
	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections"
)

// BenchmarkProjectionRebuild measures how fast the task projection is
// rebuilt from the embedded event store through the official client, as at
// sagad's start and in sagactl replay. Run:
//
//	go test -run '^$' -bench ProjectionRebuild -benchtime 3x ./integration/
func BenchmarkProjectionRebuild(b *testing.B) {
	const tasks = 20_000
	srv, err := esdbserver.Start(esdbserver.Config{Listen: "127.0.0.1:0", DataDir: b.TempDir()})
	require.NoError(b, err)
	defer srv.Close()
	store, err := eventstore.Dial(fmt.Sprintf("esdb://%s?tls=false", srv.Addr()), testLogger())
	require.NoError(b, err)
	defer store.Close()
	// Write tasks of eight events, 32 appends at a time.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := 0; i < tasks; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			id := fmt.Sprintf("r-%06d", i)
			var batch []domain.NewEvent
			task := domain.NewTask(id)
			wf := demo.Workflow()
			now := time.Now()
			events := []domain.Event{domain.Submit(domain.Order{ID: id, Body: []byte(`{}`)}, wf, "", now)}
			task.Apply(events[0])
			for len(events) < 8 {
				next := task.Next(wf, domain.Decision{Now: now, Actor: "bench"})
				if len(next) == 0 {
					r, _ := task.RecordReply(wf, domain.Reply{Step: task.InFlight()[0].Step, Attempt: 1, Succeeded: true}, domain.Decision{Now: now, Actor: "bench"})
					next = r
				}
				for _, e := range next {
					task.Apply(e)
				}
				events = append(events, next...)
			}
			for _, e := range events[:8] {
				data, _ := domain.EncodeEvent(e)
				batch = append(batch, domain.NewEvent{Type: e.EventType(), Data: data, Metadata: domain.EventMetadata{CorrelationID: id, Actor: "bench"}})
			}
			_, err := store.Append(context.Background(), domain.TaskStream(id), domain.ExpectNoStream(), batch...)
			require.NoError(b, err)
		}(i)
	}
	wg.Wait()
	b.ResetTimer()
	start := time.Now()
	for n := 0; n < b.N; n++ {
		v := projections.NewTasks(nil)
		count := 0
		stop := fmt.Errorf("caught up")
		err := store.SubscribeAll(context.Background(), domain.FromStart(), domain.TaskStreamPrefix, func(it domain.SubscriptionItem) error {
			if it.CaughtUp {
				return stop
			}
			v.Apply(*it.Event)
			count++
			return nil
		})
		require.ErrorIs(b, err, stop)
		require.Equal(b, tasks*8, count)
	}
	b.ReportMetric(float64(tasks*8*b.N)/time.Since(start).Seconds(), "events/s")
}
