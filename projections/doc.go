// Package projections builds read models from the event store: the current
// state of every task (ProcessState, LockedBy, CompleteBy, FailureCount per
// step) with an index by state. A projection holds nothing that cannot be
// rebuilt by replaying the store, and it folds events with the same
// domain.Task.Apply as the scheduler, so replay and live view agree.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package projections
