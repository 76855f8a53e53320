// Package topics reads saga's operators' topics, saga.alerts and
// saga.deadletter, without a consumer group: nothing is committed, so a
// reader never holds back retention and never takes a record from
// anyone. sagactl's alerts and deadletters commands and the web console
// share it.
//
// This package is internal to saga: its API may change in any release.
package topics
