// Package eslog is the durable storage engine behind the embedded
// EventStoreDB-protocol server: a segmented append-only log of CRC-checked
// frames, a stream index on disk (a memtable written as immutable sorted
// tables, merged in the background, with a bounded cache of stream states),
// and a single writer that group-commits concurrent appends with one fsync.
// $all needs no index: it is read from the log itself. Open loads the
// index's checkpoint and replays only the log after it, so memory and
// start-up time do not grow with the history.
//
// An event's $all position is the absolute byte offset of the event's bytes in
// the log, so positions are unique, strictly increasing and the same after a
// restart. An append is acknowledged only after its frame is on disk. At
// open, a bad frame (short, impossible length, wrong checksum) at the end of
// the newest segment with no valid frame after it is a torn write: it is cut
// and its bytes kept in <segment>.torn-<offset>. Any other bad frame is
// damage to acknowledged data and open fails with ErrCorrupt. Scavenge
// rewrites closed segments compacted, with a position map that keeps every
// position valid (see Scavenge and compact.go); the maps stay on disk and
// reads load them into a cache bounded in bytes (see mapcache.go).
//
// Readers never see an event before it is durable, and they read the
// committed log by position, so a reader that follows the log (a
// subscription) cannot miss, repeat or reorder events.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package eslog
