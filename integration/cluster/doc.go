// Package cluster tests saga's split topology as a distributed system, in
// the spirit of Jepsen: it starts a standalone event store, a broker and
// sagad processes by role as separate processes (each as its own user when
// run as root), drives them with orders through Kafka, injects faults with a
// nemesis (kill -9, SIGSTOP/SIGCONT, partitions of one process from the
// event store or the broker by per-user firewall rules on loopback) and
// checks the invariants of integration/invariants on what the event store
// and the API hold. README.md tells how to run the short and the long
// version.
package cluster
