package eventstore_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/eventstore"
)

func TestWithPasswordFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(file, []byte("p@ss:w/rd\n"), 0o600))

	got, err := eventstore.WithPasswordFile("esdb://admin@eventstore:2113?tls=true&tlsCAFile=/run/secrets/ca.pem", file)
	require.NoError(t, err)
	assert.Equal(t, "esdb://admin:p%40ss%3Aw%2Frd@eventstore:2113?tls=true&tlsCAFile=/run/secrets/ca.pem", got)
	assert.Equal(t, "esdb://admin:xxxxx@eventstore:2113?tls=true&tlsCAFile=/run/secrets/ca.pem", eventstore.Redact(got))

	same, err := eventstore.WithPasswordFile("esdb://admin@h:2113", "")
	require.NoError(t, err)
	assert.Equal(t, "esdb://admin@h:2113", same, "no file, no change")

	for _, bad := range []string{"esdb://h:2113?tls=true", "esdb://h:2113?x=a@b", "esdb://admin:old@h:2113", "h:2113"} {
		_, err := eventstore.WithPasswordFile(bad, file)
		assert.Error(t, err, bad)
		if err != nil {
			assert.NotContains(t, err.Error(), "old", "the password already there is not shown")
		}
	}
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, err = eventstore.WithPasswordFile("esdb://admin@h:2113", empty)
	assert.Error(t, err)
	_, err = eventstore.WithPasswordFile("esdb://admin@h:2113", filepath.Join(dir, "missing"))
	assert.Error(t, err)
}
