package domain_test

import (
	"encoding/json"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
)

// TestDefinitionNamesSecretsInHeadersAndBody: {{secret.NAME}} is accepted
// in header values and the body, its name checked at registration, and
// refused in the URL; the definition keeps the placeholder, never a value.
func TestDefinitionNamesSecretsInHeadersAndBody(t *testing.T) {
	w, err := domain.ParseDefinition([]byte(`{"name":"pay","steps":[{"name":"charge","http":{"url":"https://pay.example.com/charge",
		"headers":{"Authorization":"Bearer {{ secret.PAY_TOKEN }}"},"body":{"key":"{{secret.payKey2}}"},
		"followRedirects":true},"compensation":{"http":{"url":"https://pay.example.com/refund","headers":{"X-Key":"{{secret.PAY_TOKEN}}"}}}}]}`))
	require.NoError(t, err)
	assert.True(t, w.Steps[0].HTTP.FollowRedirects)
	doc, err := w.MarshalDefinition()
	require.NoError(t, err)
	assert.Contains(t, string(doc), "{{ secret.PAY_TOKEN }}")

	for name, def := range map[string]string{
		"in the url":    `{"url":"https://pay.example.com/charge?token={{secret.PAY_TOKEN}}"}`,
		"bad name":      `{"url":"https://pay.example.com/charge","headers":{"Authorization":"{{secret.PAY-TOKEN}}"}}`,
		"no name":       `{"url":"https://pay.example.com/charge","headers":{"Authorization":"{{secret}}"}}`,
		"two names":     `{"url":"https://pay.example.com/charge","body":{"k":"{{secret.A.B}}"}}`,
		"starts digit":  `{"url":"https://pay.example.com/charge","body":{"k":"{{secret.1A}}"}}`,
		"not a boolean": `{"url":"https://pay.example.com/charge","followRedirects":"yes"}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := domain.ParseDefinition([]byte(`{"name":"pay","steps":[{"name":"charge","http":` + def + `}]}`))
			var de *domain.DefinitionError
			require.True(t, errors.As(err, &de), "%v", err)
		})
	}
}

// TestSecretsResolveOnlyWhereTheCallIsMade: rendering resolves a secret
// through TemplateData.Secret, and without one names the secret and
// fails.
func TestSecretsResolveOnlyWhereTheCallIsMade(t *testing.T) {
	data := domain.TemplateData{Order: json.RawMessage(`{"id":"o-1"}`)}
	_, err := domain.RenderText("Bearer {{secret.TOKEN}}", data, nil)
	require.ErrorIs(t, err, domain.ErrTemplate)
	assert.Contains(t, err.Error(), "secret TOKEN")

	data.Secret = func(name string) (string, error) {
		if name == "TOKEN" {
			return "s3cr\"et", nil
		}
		return "", errors.Newf("secret %s is not set", name)
	}
	got, err := domain.RenderText("Bearer {{secret.TOKEN}}", data, nil)
	require.NoError(t, err)
	assert.Equal(t, `Bearer s3cr"et`, got)
	body, err := domain.RenderJSON(json.RawMessage(`{"key":"{{secret.TOKEN}}","id":"{{order.id}}"}`), data)
	require.NoError(t, err)
	assert.JSONEq(t, `{"key":"s3cr\"et","id":"o-1"}`, string(body))
	_, err = domain.RenderText("{{secret.OTHER}}", data, nil)
	require.ErrorIs(t, err, domain.ErrTemplate)
	assert.Contains(t, err.Error(), "secret OTHER is not set")
}
