// Package esdbwire is the hand-written protobuf codec of EventStoreDB's
// BatchAppend call, shared by the client (adapters/eventstore) and the
// embedded server (adapters/esdbserver): the client encodes requests and
// decodes answers, the server decodes requests and encodes answers, with
// the same field numbers and the same encodings on both sides. Reflection
// based protobuf costs dozens of allocations per append (a map, oneof
// wrappers, a message per id); by hand it costs a few. The bytes are
// protobuf's, so any client or server reads them, and whatever the hand
// decoders do not handle goes to protobuf.
package esdbwire
