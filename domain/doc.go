// Package domain is the pure core of saga: workflow definitions, the task's
// events and their fold into state, the decisions that turn a task's history
// and a trigger into new events, and the wire messages exchanged with
// callers and agents. It depends on the standard library and
// cockroachdb/errors only; it performs no I/O and reads no clock (callers
// pass the time in).
package domain
