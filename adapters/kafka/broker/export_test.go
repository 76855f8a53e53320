package broker

import "fmt"

// SyncHooks are test hooks on a broker's sync layer; see syncHooks.
type SyncHooks struct {
	// Joined runs after a produce's response joined an fsync round.
	Joined func()
	// Round runs before a round's fsyncs, with its partitions as
	// "topic/partition"; it may block to hold the round.
	Round func(parts []string)
	// Synced runs after a file was fsynced, with its size then.
	Synced func(path string, size int64)
}

// SetSyncHooks installs hooks; call it before producing.
func SetSyncHooks(b *Broker, h SyncHooks) {
	b.sync.hooks = syncHooks{joined: h.Joined, synced: h.Synced}
	if h.Round != nil {
		b.sync.hooks.round = func(parts []topicPartition) {
			names := make([]string, len(parts))
			for i, p := range parts {
				names[i] = fmt.Sprintf("%s/%d", p.topic, p.part)
			}
			h.Round(names)
		}
	}
}

// SyncRounds counts the fsync rounds carried out.
func SyncRounds(b *Broker) int64 { return b.sync.rounds.Load() }

// PartitionDir is where a partition's segment files are.
func PartitionDir(dataDir, topic string, part int32) string {
	return partitionDir(dataDir, topic, part)
}
