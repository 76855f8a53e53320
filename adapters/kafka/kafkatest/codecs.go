// Package kafkatest holds helpers for tests of saga's Kafka clients. It is
// imported only by tests.
package kafkatest

import (
	"maps"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BatchCodecs is a franz-go hook (kgo.WithHooks) that records the
// compression codec of every record batch its client fetches, by topic:
// 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
type BatchCodecs struct {
	mu    sync.Mutex
	codes map[string][]uint8
}

// OnFetchBatchRead records the batch's codec.
func (b *BatchCodecs) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.FetchBatchMetrics) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.codes == nil {
		b.codes = map[string][]uint8{}
	}
	b.codes[topic] = append(b.codes[topic], m.CompressionType)
}

// Codecs returns the codecs recorded so far, by topic.
func (b *BatchCodecs) Codecs() map[string][]uint8 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.codes)
}
