package kafka_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/kafka"
)

func TestSecurityValidate(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(pw, []byte("secret\n"), 0o600))
	for name, tc := range map[string]struct {
		sec  kafka.Security
		want string
	}{
		"none":              {kafka.Security{}, ""},
		"scram from file":   {kafka.Security{SASLMechanism: "SCRAM-SHA-256", SASLUser: "u", SASLPasswordFile: pw}, ""},
		"no user":           {kafka.Security{SASLMechanism: "SCRAM-SHA-512", SASLPassword: "p"}, "needs a user"},
		"no password":       {kafka.Security{SASLMechanism: "PLAIN", SASLUser: "u", TLS: true}, "needs a password"},
		"plain without tls": {kafka.Security{SASLMechanism: "PLAIN", SASLUser: "u", SASLPassword: "p"}, "in clear"},
		"unknown":           {kafka.Security{SASLMechanism: "GSSAPI"}, "unknown SASL mechanism"},
		"oauth no token":    {kafka.Security{SASLMechanism: "OAUTHBEARER"}, "needs a token"},
		"cert without key":  {kafka.Security{CertFile: pw}, "needs its key"},
		"missing ca":        {kafka.Security{CAFile: filepath.Join(dir, "nope.pem")}, "CA file"},
	} {
		t.Run(name, func(t *testing.T) {
			err := tc.sec.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, kafka.ErrInvalidSecurity)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestSecurityFlagsKeepSecretsOut: passwords come from a file or the
// environment, never from a flag, and printing the settings shows none.
func TestSecurityFlagsKeepSecretsOut(t *testing.T) {
	t.Setenv(kafka.EnvSASLMechanism, "SCRAM-SHA-256")
	t.Setenv(kafka.EnvSASLUser, "saga")
	t.Setenv(kafka.EnvSASLPassword, "hunter2-secret")
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	sec := kafka.RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"--kafka-tls"}))
	assert.Nil(t, fs.Lookup("kafka-sasl-password"), "no password flag")
	assert.Equal(t, "hunter2-secret", sec.SASLPassword)
	assert.True(t, sec.TLS)
	_, err := sec.Opts()
	require.NoError(t, err)
	var usage strings.Builder
	fs.SetOutput(&usage)
	fs.PrintDefaults()
	for _, shown := range []string{sec.String(), usage.String(), errors.Newf("%v %+v %#v", sec, sec, sec).Error()} {
		assert.NotContains(t, shown, "hunter2")
	}
}
