package port_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/processes/port"
)

// TestHeadersGetReadsTheLastOfAKey: a Kafka record may repeat a header;
// Get answers as a map built from the headers in order would, the last
// value winning, and "" for a header that is not there.
func TestHeadersGetReadsTheLastOfAKey(t *testing.T) {
	hs := port.Headers{{Key: "ce_type", Value: "first"}, {Key: "traceparent", Value: "tp"}, {Key: "ce_type", Value: "last"}, {Key: "empty"}}
	assert.Equal(t, "last", hs.Get("ce_type"))
	assert.Equal(t, "tp", hs.Get("traceparent"))
	assert.Equal(t, "", hs.Get("empty"))
	assert.Equal(t, "", hs.Get("ce_id"))
	assert.Equal(t, "", port.Headers(nil).Get("ce_type"))
}
