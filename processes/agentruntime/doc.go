// Package agentruntime is an agent's own runtime: it carries commands out
// against a remote service within their deadlines, retrying with backoff,
// admits no more calls at once than the instance takes (in priority
// order), detects calls that hang and open breakers, announces the
// instance with heartbeats, and replies to the scheduler. It depends on the
// domain, the wire protocol and the ports of processes/port, not on the
// process managers of package processes.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package agentruntime
