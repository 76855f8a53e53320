package protocol_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

func TestParseOrder(t *testing.T) {
	o, err := protocol.ParseOrder([]byte(` {"orderId":"o-1","items":[1,2]} `), 1024)
	require.NoError(t, err)
	assert.Equal(t, "o-1", o.ID)
	assert.Equal(t, "order", o.Workflow, "workflow defaults to order")
	assert.JSONEq(t, `{"orderId":"o-1","items":[1,2]}`, string(o.Body))

	for name, body := range map[string]string{
		"not json":            `{"orderId":`,
		"not an object":       `["o-1"]`,
		"missing orderId":     `{"workflow":"order"}`,
		"orderId wrong type":  `{"orderId":true}`,
		"orderId with spaces": `{"orderId":"a b"}`,
		"bad replyTo":         `{"orderId":"o-1","replyTo":"no/slashes"}`,
		"oversized":           `{"orderId":"o-1","pad":"` + string(make([]byte, 2048)) + `"}`,
		"empty":               ``,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := protocol.ParseOrder([]byte(body), 1024)
			assert.ErrorIs(t, err, domain.ErrInvalidMessage)
		})
	}
}

func TestParseStepReply(t *testing.T) {
	r, err := protocol.ParseStepReply([]byte(`{"taskId":"o-1","step":"s","attempt":1,"outcome":"succeeded"}`))
	require.NoError(t, err)
	assert.Equal(t, protocol.ActionExecute, r.Action)
	for _, body := range []string{`{}`, `nope`, `{"taskId":"o-1","step":"s","attempt":0,"outcome":"succeeded"}`,
		`{"taskId":"o-1","step":"s","attempt":1,"outcome":"maybe"}`, `{"taskId":"o-1","step":"s","attempt":1,"outcome":"failed"}`,
		`{"taskId":1,"step":"s","attempt":1,"outcome":"succeeded"}`} {
		_, err := protocol.ParseStepReply([]byte(body))
		assert.ErrorIs(t, err, domain.ErrInvalidMessage, body)
	}
}
