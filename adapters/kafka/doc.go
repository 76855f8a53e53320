// Package kafka connects saga's processes to Kafka with franz-go: the
// embedded broker (franz-go's kfake, persisted to a data directory), topic
// creation, a producer that implements the processes' CommandSender,
// ReplySender and DeadLetters ports, and a consume loop that commits offsets
// only after a handler has finished with a record.
//
// Durability of the embedded broker: a produce to a synced topic (by
// default the orders, dead-letter, status, reply and alert topics, see
// DefaultSyncTopics) is acknowledged only once its records are fsynced;
// concurrent produces share fsyncs. That is what the durability contract
// needs: an acknowledged order survives a power loss until the submitter
// has appended its TaskSubmitted to the event store or dead-lettered it,
// and a status or alert survives once its publisher has recorded sending
// it. Commands, replies,
// committed offsets and producer state are written without fsync: recovery
// re-derives commands and replies from the event store (in-flight commands
// are re-sent, lost replies time out and are retried), and a committed
// offset left past a log end shortened by a power loss is clamped back at
// start, so no record is skipped. One broker at a time may use a data
// directory (ErrDataDirLocked).
//
// Security: every client saga makes takes its TLS and SASL settings from
// one Security (RegisterFlags gives sagad, sagactl and sagabench the same
// flags and environment variables); the embedded broker can require TLS
// and SASL (BrokerConfig.TLS and Users).
//
// Messages follow the CloudEvents Kafka binding in binary mode: ce_*
// headers and a JSON body, keyed by task id so one task's messages stay in
// order.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package kafka
