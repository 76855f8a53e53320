package domain

// AppendEventJSON and DecodeEventJSON expose the reflection-free event
// codec, so tests can hold it to encoding/json's output.
var (
	AppendEventJSON = appendEventJSON
	DecodeEventJSON = decodeEventJSON
)
