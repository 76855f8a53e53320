package eventstore_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/eventstore"
)

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"esdb://127.0.0.1:2113?tls=false":                            "esdb://127.0.0.1:2113?tls=false",
		"esdb://admin:changeit@127.0.0.1:2113?tls=true":              "esdb://admin:xxxxx@127.0.0.1:2113?tls=true",
		"esdb://admin:p@ss:w0rd@h1:2113,h2:2113?tlsCAFile=/x/ca.pem": "esdb://admin:xxxxx@h1:2113,h2:2113?tlsCAFile=/x/ca.pem",
		"esdb+discover://u:s3cr%2Ft@cluster.example:2113":            "esdb+discover://u:xxxxx@cluster.example:2113",
		"not a url esdb://u:secret@":                                 "not a url esdb://u:xxxxx@",
		// An @ after a ? may end a password with an unencoded ? in it
		// (esdb://admin:se?cret@host): redacting too much is the safe side.
		"esdb://h:2113?x=a@b": "esdb://h:xxxxx@b",
		// An @ in the query after a well-formed password stays.
		"esdb://admin:changeit@h:2113?connectionName=saga@vm": "esdb://admin:xxxxx@h:2113?connectionName=saga@vm",
	} {
		assert.Equal(t, want, eventstore.Redact(in), in)
	}
}

// malformedConnections are connection strings a URL parser misreads, each
// with the password "hunter2" in it: an unencoded #, space, / or ? in the
// password, a scheme with one slash, none, or no scheme at all.
var malformedConnections = []string{
	"esdb://admin:hun#ter2@127.0.0.1:2113?tls=false",
	"esdb://admin:hun ter2@127.0.0.1:2113?tls=false",
	"esdb://admin:hun/ter2@127.0.0.1:2113?tls=false",
	"esdb://admin:hun?ter2@127.0.0.1:2113?tls=false",
	"esdb://admin:1234#hunter2@127.0.0.1:2113?tls=false",
	"esdb:/admin:hunter2@127.0.0.1:2113?tls=false",
	"esdb:admin:hunter2@127.0.0.1:2113?tls=false",
	"admin:hunter2@127.0.0.1:2113",
	"esdb://ad#min:hunter2@127.0.0.1:2113",
}

// TestMalformedConnectionStringsAreRedacted: whatever the mistake, neither
// Redact nor the error Dial returns shows the password, and the error says
// what to fix.
func TestMalformedConnectionStringsAreRedacted(t *testing.T) {
	for _, in := range malformedConnections {
		_, err := eventstore.Dial(in, nil)
		require.Error(t, err, in)
		for _, shown := range []string{eventstore.Redact(in), err.Error()} {
			for _, part := range []string{"hun", "ter2", "1234"} {
				assert.NotContains(t, shown, part, in)
			}
		}
	}
	_, err := eventstore.Dial("esdb://admin:hun#ter2@127.0.0.1:2113?tls=false", nil)
	assert.ErrorIs(t, err, eventstore.ErrMalformedCredentials)
	assert.Contains(t, err.Error(), "percent-encode")
	_, err = eventstore.Dial("esdb:/admin:hunter2@127.0.0.1:2113?tls=false", nil)
	assert.ErrorIs(t, err, eventstore.ErrMalformedCredentials)
	assert.Contains(t, err.Error(), "two slashes")

	var flag eventstore.URLFlag
	for _, in := range malformedConnections {
		require.NoError(t, flag.Set(in))
		assert.NotContains(t, flag.String(), "hun", "as -h shows a default: %s", in)
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
