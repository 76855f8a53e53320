// Package kafka connects saga's processes to Kafka with franz-go: the
// embedded broker (franz-go's kfake, persisted to a data directory), topic
// creation, a producer that implements the processes' CommandSender,
// ReplySender and DeadLetters ports, and a consume loop that commits offsets
// only after a handler has finished with a record.
//
// Messages follow the CloudEvents Kafka binding in binary mode: ce_*
// headers and a JSON body, keyed by task id so one task's messages stay in
// order.
package kafka
