// Package integration runs whole sagas end to end: the complete system of
// cmd/sagad/app in-process, on the embedded Kafka and event store on random
// loopback ports, driven by a plain franz-go producer, with restarts.
package integration
