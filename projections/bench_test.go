package projections_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections"
	"github.com/sagaengine/saga/projections/audittest"
)

// BenchmarkTaskProjectionMemory reports the heap the task projection holds
// per task, for 100,000 processed three-step tasks. Run:
//
//	go test -run '^$' -bench TaskProjectionMemory -benchtime 1x ./projections/
func BenchmarkTaskProjectionMemory(b *testing.B) {
	const tasks = 100_000
	events := audittest.History() // a 21-event compensated task, as a template
	for n := 0; n < b.N; n++ {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		v := projections.NewTasks(nil)
		pos := uint64(0)
		for i := 0; i < tasks; i++ {
			stream := fmt.Sprintf("task-o-%07d", i)
			for _, e := range events[:8] { // submitted, three steps, and three dispatches
				pos++
				e.Stream, e.Position = stream, pos
				v.Apply(e)
			}
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/tasks, "bytes/task")
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "MiB/100k-tasks")
		runtime.KeepAlive(v)
	}
}

// BenchmarkTaskProjectionApply reports how fast the projection folds
// events, without the store.
func BenchmarkTaskProjectionApply(b *testing.B) {
	events := audittest.History()
	v := projections.NewTasks(nil)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		e := events[n%len(events)]
		e.Stream = fmt.Sprintf("task-o-%d", n/len(events))
		e.Position = uint64(n + 1)
		if d, err := domain.DecodeEvent(e.Type, e.Data); err == nil {
			e.Decoded = d
		}
		v.Apply(e)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
