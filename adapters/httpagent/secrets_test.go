package httpagent_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpagent"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes/agentruntime"
)

// TestSecretsAreResolvedAtCallTime: a header and the body name secrets;
// the agent reads them from its directory (a file replaced is read anew)
// or its environment when it calls, and the command holds only the
// placeholders.
func TestSecretsAreResolvedAtCallTime(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "PAY_TOKEN"), []byte("tok-1\n"), 0o600))
	env := map[string]string{"SAGA_SECRET_API_KEY": "key-9"}
	h := httpagent.New(httpagent.Config{Secrets: &httpagent.Secrets{Dir: dir, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}})
	srv := newRecorder(t, answer(http.StatusOK, `{}`))
	cmd := command(&domain.HTTPCall{Method: http.MethodPost, URL: srv.URL + "/charge",
		Headers: map[string]string{"Authorization": "Bearer {{ secret.PAY_TOKEN }}"}, Body: []byte(`{"apiKey":"{{secret.API_KEY}}","order":"{{order.orderId}}"}`)})
	_, err := handle(t, h, cmd)
	require.NoError(t, err)
	got := srv.last(t)
	assert.Equal(t, "Bearer tok-1", got.Header.Get("Authorization"))
	assert.JSONEq(t, `{"apiKey":"key-9","order":"o-1"}`, string(got.Body))
	assert.Equal(t, "Bearer {{ secret.PAY_TOKEN }}", cmd.HTTP.Headers["Authorization"], "the command keeps the placeholder")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "PAY_TOKEN"), []byte("tok-2"), 0o600))
	_, err = handle(t, h, cmd)
	require.NoError(t, err)
	assert.Equal(t, "Bearer tok-2", srv.last(t).Header.Get("Authorization"))
}

// TestMissingSecretFailsForGoodNamingIt: a secret the process lacks fails
// the step for good, naming the secret and where it was looked for.
func TestMissingSecretFailsForGoodNamingIt(t *testing.T) {
	dir := t.TempDir()
	h := httpagent.New(httpagent.Config{Secrets: &httpagent.Secrets{Dir: dir, LookupEnv: func(string) (string, bool) { return "", false }}})
	srv := newRecorder(t, answer(http.StatusOK, `{}`))
	_, err := handle(t, h, command(&domain.HTTPCall{Method: http.MethodPost, URL: srv.URL,
		Headers: map[string]string{"Authorization": "Bearer {{secret.PAY_TOKEN}}"}}))
	require.Error(t, err)
	assert.True(t, errors.Is(err, agentruntime.ErrPermanent), "%v", err)
	assert.Contains(t, err.Error(), "secret PAY_TOKEN is not set")
	assert.Contains(t, err.Error(), "SAGA_SECRET_PAY_TOKEN")
	assert.Contains(t, err.Error(), filepath.Join(dir, "PAY_TOKEN"))
	assert.Zero(t, srv.calls.Load(), "the service was called without its secret")

	_, err = httpagent.Secrets{Dir: dir, LookupEnv: func(string) (string, bool) { return "", false }}.Lookup("PAY_TOKEN")
	assert.True(t, errors.Is(err, httpagent.ErrSecretMissing), "%v", err)
}

// TestSecretValuesNeverLeaveInResultsOrErrors: a service that echoes the
// secret, in an error or in its result, has it replaced by its name in
// what the agent reports (which goes into events, logs and traces).
func TestSecretValuesNeverLeaveInResultsOrErrors(t *testing.T) {
	secret := `hunter2"\x<&`
	h := httpagent.New(httpagent.Config{Secrets: &httpagent.Secrets{LookupEnv: func(k string) (string, bool) { return secret, k == "SAGA_SECRET_TOKEN" }}})
	echo := func(status int) *recorder {
		return newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"youSent":` + jsonString(r.Header.Get("Authorization")) + `}`))
		})
	}
	call := func(url string) *domain.HTTPCall {
		return &domain.HTTPCall{Method: http.MethodGet, URL: url, Headers: map[string]string{"Authorization": "{{secret.TOKEN}}"}}
	}
	result, err := handle(t, h, command(call(echo(http.StatusOK).URL)))
	require.NoError(t, err)
	assert.NotContains(t, string(result), "hunter2")
	assert.JSONEq(t, `{"youSent":"[secret TOKEN]"}`, string(result))

	for _, status := range []int{http.StatusBadRequest, http.StatusServiceUnavailable} {
		_, err = handle(t, h, command(call(echo(status).URL)))
		require.Error(t, err)
		assert.NotContains(t, err.Error(), "hunter2")
		assert.Contains(t, err.Error(), "[secret TOKEN]")
		assert.Equal(t, status == http.StatusBadRequest, errors.Is(err, agentruntime.ErrPermanent), "%v", err)
		var se *httpagent.StatusError
		assert.True(t, errors.As(err, &se), "the error keeps its kind")
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
