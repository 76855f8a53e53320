// Package broker is the Kafka broker sagad embeds: franz-go's kfake,
// persisted to a data directory, with what saga's durability contract
// needs on top: acknowledgements after fsync, committed offsets clamped at
// start, torn state logs cut, retention that never removes an unconsumed
// record (a topic's own retention.ms and retention.bytes included), a cap
// on auto-created topics and the deletion of idle reply topics, topic
// configs checked and reported as they are enforced (configGuard), TLS and
// SASL. saga's clients (package kafka) talk to it as to any
// Kafka; it imports nothing of saga above domain and domain/protocol.
//
// Durability: a produce to a synced topic (by default the orders,
// dead-letter, status, reply and alert topics, see DefaultSyncTopics) is
// acknowledged only once its records are fsynced; concurrent produces share
// fsyncs. That is what the durability contract needs: an acknowledged order
// survives a power loss until the submitter has appended its TaskSubmitted
// to the event store or dead-lettered it, and a status or alert survives
// once its publisher has recorded sending it. Commands, replies, committed
// offsets and producer state are written without fsync: recovery re-derives
// commands and replies from the event store (in-flight commands are
// re-sent, lost replies time out and are retried), and a committed offset
// left past a log end shortened by a power loss is clamped back at start,
// so no record is skipped. One broker at a time may use a data directory
// (ErrDataDirLocked).
//
// Security: the broker can require TLS and SASL (Config.TLS and Users).
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package broker
