// Package secure prepares saga's secure embedded mode (sagad --secure): a
// local certificate authority, a server certificate for the embedded Kafka
// broker and event store, and random credentials, generated into a
// directory on first start and reused after.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package secure
