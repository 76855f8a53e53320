package eventstore_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/adapters/eventstore"
)

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"esdb://127.0.0.1:2113?tls=false":                            "esdb://127.0.0.1:2113?tls=false",
		"esdb://admin:changeit@127.0.0.1:2113?tls=true":              "esdb://admin:xxxxx@127.0.0.1:2113?tls=true",
		"esdb://admin:p@ss:w0rd@h1:2113,h2:2113?tlsCAFile=/x/ca.pem": "esdb://admin:xxxxx@h1:2113,h2:2113?tlsCAFile=/x/ca.pem",
		"esdb+discover://u:s3cr%2Ft@cluster.example:2113":            "esdb+discover://u:xxxxx@cluster.example:2113",
		"not a url esdb://u:secret@":                                 "not a url esdb://u:xxxxx@",
		"esdb://h:2113?x=a@b":                                        "esdb://h:2113?x=a@b",
	} {
		assert.Equal(t, want, eventstore.Redact(in), in)
	}
}

// TestDialErrorsHideThePassword: a connection string the client refuses
// is reported without its password.
func TestDialErrorsHideThePassword(t *testing.T) {
	_, err := eventstore.Dial("esdb://admin:hunter2@host:notaport?tls=true", nil)
	if assert.Error(t, err) {
		assert.NotContains(t, err.Error(), "hunter2")
		assert.Contains(t, err.Error(), "admin:xxxxx@")
	}
}
