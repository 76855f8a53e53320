package kafka_test

import (
	"testing"

	"github.com/sagaengine/saga/adapters/kafka"
)

// BenchmarkNewRecord builds a command record as the scheduler does, with
// the sender's traceparent: every record saga produces pays this.
func BenchmarkNewRecord(b *testing.B) {
	body := []byte(`{"taskId":"0b6f3c1e-6a8e-4c59-a1f7-6f3b1d2c9e10","step":"charge"}`)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	b.ReportAllocs()
	for b.Loop() {
		_ = kafka.NewRecord("saga.cmd.payments", "0b6f3c1e-6a8e-4c59-a1f7-6f3b1d2c9e10", "saga.step.execute", "saga/scheduler@host", body, parent)
	}
}
