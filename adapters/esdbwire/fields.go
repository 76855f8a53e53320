package esdbwire

import "google.golang.org/protobuf/encoding/protowire"

// Field numbers of BatchAppendReq, from the client protocol (streams.proto).
const (
	reqCorrelationID protowire.Number = 1
	reqOptions       protowire.Number = 2
	reqProposed      protowire.Number = 3
	reqIsFinal       protowire.Number = 4
)

// Field numbers of BatchAppendReq.Options.expected_stream_position, which
// BatchAppendResp echoes at field numbers three higher.
const (
	ExpectStreamPosition protowire.Number = 2
	ExpectNoStream       protowire.Number = 3
	ExpectAny            protowire.Number = 4
	ExpectStreamExists   protowire.Number = 5
)

// Field numbers of BatchAppendResp.
const (
	respCorrelationID protowire.Number = 1
	respError         protowire.Number = 2
	respSuccess       protowire.Number = 3
	respStream        protowire.Number = 4
)

// Keys of a proposed event's metadata.
const (
	MetaType        = "type"
	MetaContentType = "content-type"
)
