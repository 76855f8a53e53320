// Package processes holds saga's process managers: the submitter that turns
// orders into tasks, the scheduler that drives each task through its steps,
// the supervisor that times attempts out, the operator's actions and the
// status publisher. They depend on the domain and on the ports declared
// here and in processes/port, which the adapters implement; cmd wires them
// together. The agent runtime that carries a step out against a remote
// service is processes/agentruntime; which agent instance takes a dispatch
// is processes/dispatch.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package processes
