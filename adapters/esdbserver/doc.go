// Package esdbserver is an embedded server that speaks EventStoreDB's gRPC
// protocol (the Streams, PersistentSubscriptions and ServerFeatures
// services) on top of the durable eslog store, so that the official
// EventStoreDB clients, and saga's own event-store adapter, can use it as
// they use EventStoreDB.
//
// It implements appends with every kind of expected revision, reads of
// streams and of $all in both directions, catch-up subscriptions with
// server-side filters and checkpoints, soft delete, tombstone and stream
// metadata ($maxCount, $maxAge, $tb). Persistent subscriptions (groups on a
// stream or a filtered $all, with ack, nack, parking, replay, consumer
// strategies and checkpoints) keep their settings, checkpoints and parked
// messages in system streams of the store itself, so they survive restarts
// and crashes (docs/eventstore.md says exactly what a crash redelivers).
// Projections, users and gossip answer Unimplemented.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package esdbserver
