// Package domain is the pure core of saga: workflow definitions, the task's
// events and their fold into state, the decisions that turn a task's history
// and a trigger (an order, an agent's reply, a timeout, an operator's
// action) into new events, and the task repository port. It depends on the
// standard library and cockroachdb/errors only; it performs no I/O and reads
// no clock (callers pass the time in).
//
// The wire format of the messages exchanged with callers and agents (topic
// names, CloudEvents types, commands, replies, statuses, alerts, the HTTP
// API's task view) is package domain/protocol, which builds on domain;
// domain never imports it, so its decisions take domain values (Order,
// Reply), not wire messages.
package domain
