// Package processes holds saga's long-running processes: the submitter that
// turns orders into tasks, the scheduler (a process manager) that drives
// each task through its steps, and the agent runtime that carries a step out
// against a remote service. They depend on the domain and on the ports
// declared here, which the adapters implement; cmd wires them together.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package processes
