// Package eslog is the durable storage engine behind the embedded
// EventStoreDB-protocol server: a segmented append-only log of CRC-checked
// frames, an in-memory index of streams and of $all rebuilt from the log at
// open, and a single writer that group-commits concurrent appends with one
// fsync.
//
// An event's $all position is the absolute byte offset of the event's bytes in
// the log, so positions are unique, strictly increasing and the same after a
// restart. An append is acknowledged only after its frame is on disk; a torn
// frame at the tail of the newest segment is detected by its length or
// checksum and cut at open.
//
// Readers never see an event before it is durable, and they read the
// committed log by position, so a reader that follows the log (a
// subscription) cannot miss, repeat or reorder events.
package eslog
