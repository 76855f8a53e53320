// Package kafka is saga's Kafka client side, on franz-go: clients with
// saga's producer defaults, topic creation, a producer that implements the
// processes' CommandSender, ReplySender and DeadLetters ports, a consume
// loop that commits offsets only after a handler has finished with a
// record, agent instances' heartbeats and the directory that follows them,
// command queues, routing of commands to an agent instance's partition, and
// the lease that elects one supervisor. It works with any Kafka; the
// embedded broker sagad serves is package broker (adapters/kafka/broker).
//
// Security: every client saga makes takes its TLS and SASL settings from
// one Security (RegisterFlags gives sagad, sagactl and sagabench the same
// flags and environment variables).
//
// Messages follow the CloudEvents Kafka binding in binary mode: ce_*
// headers and a JSON body, keyed by task id so one task's messages stay in
// order.
//
// This package is internal to saga: its API may change in any release (see
// docs/api.md for the public packages).
package kafka
