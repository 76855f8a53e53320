// Package port declares what the process managers (package processes), the
// agent runtime (processes/agentruntime) and dispatch policy
// (processes/dispatch) share: the clock they wait on, the messages they
// consume, the ports they send replies, dead letters and heartbeats through,
// the agent directory, and the errors of an invalid configuration. It
// depends on the domain and the wire protocol only.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package port
