package httpagent

import (
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
)

// ErrSecretMissing is returned (as a permanent failure) when a step names
// a secret its agent's process does not have.
var ErrSecretMissing = errors.New("secret not set")

// SecretEnvPrefix starts the environment variable of a secret:
// SAGA_SECRET_NAME holds the secret NAME.
const SecretEnvPrefix = "SAGA_SECRET_"

// MaxSecretBytes bounds a secret's file.
const MaxSecretBytes = 64 << 10

// Secrets resolves {{secret.NAME}} in the agent's process, at call time:
// from the file NAME in Dir when there is one (without its trailing line
// break), else from the environment variable SAGA_SECRET_NAME. Files are
// read at every call, so a secret replaced on disk is used at once.
type Secrets struct {
	// Dir holds one file per secret; empty means none.
	Dir string
	// LookupEnv reads the environment; default os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// Lookup returns the secret name, or an error that names it (never its
// value): ErrSecretMissing when neither its file nor its variable exists.
func (s Secrets) Lookup(name string) (string, error) {
	if !domain.ValidSecretName(name) {
		return "", errors.Newf("%q is not a secret name", name)
	}
	if s.Dir != "" {
		value, err := readSecret(filepath.Join(s.Dir, name))
		switch {
		case err == nil:
			return value, nil
		case !errors.Is(err, fs.ErrNotExist):
			return "", errors.Wrapf(err, "secret %s", name)
		}
	}
	lookup := s.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	if value, ok := lookup(SecretEnvPrefix + name); ok {
		return value, nil
	}
	where := "no $" + SecretEnvPrefix + name
	if s.Dir != "" {
		where = "no file " + filepath.Join(s.Dir, name) + " and " + where
	}
	return "", errors.Mark(errors.Newf("secret %s is not set in the agent's process: %s", name, where), ErrSecretMissing)
}

// readSecret reads a secret's file, without its trailing line break.
func readSecret(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretBytes+1))
	switch {
	case err != nil:
		return "", errors.Wrap(err, "read its file")
	case len(b) > MaxSecretBytes:
		return "", errors.Newf("its file is over %d bytes", MaxSecretBytes)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// secretsUsed records the secrets a call resolved, to keep their values
// out of what the call reports.
type secretsUsed struct {
	lookup func(string) (string, error)
	values map[string]string
}

func (u *secretsUsed) resolve(name string) (string, error) {
	v, err := u.lookup(name)
	if err == nil && v != "" {
		if u.values == nil {
			u.values = map[string]string{}
		}
		u.values[name] = v
	}
	return v, err
}

// redact replaces the values of the secrets used in text by [secret NAME],
// as they are and as they appear in JSON strings (an answer quoted in an
// error is often JSON), longest first, so that a value containing another
// is replaced whole.
func (u *secretsUsed) redact(text string) string {
	if u == nil || len(u.values) == 0 {
		return text
	}
	for _, name := range u.byLength() {
		text = strings.ReplaceAll(text, u.values[name], "[secret "+name+"]")
		for _, form := range jsonForms(u.values[name]) {
			text = strings.ReplaceAll(text, form, "[secret "+name+"]")
		}
	}
	return text
}

// redactJSON replaces the values of the secrets used in a JSON result, as
// they appear in its strings.
func (u *secretsUsed) redactJSON(result json.RawMessage) json.RawMessage {
	if u == nil || len(u.values) == 0 || len(result) == 0 {
		return result
	}
	text := string(result)
	for _, name := range u.byLength() {
		for _, form := range jsonForms(u.values[name]) {
			text = strings.ReplaceAll(text, form, "[secret "+name+"]")
		}
	}
	return json.RawMessage(text)
}

// jsonForms are s as it is written inside a JSON string: with <, > and &
// as they are, and escaped.
func jsonForms(s string) []string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	plain := strings.TrimSuffix(b.String(), "\n")
	escaped, _ := json.Marshal(s)
	return []string{plain[1 : len(plain)-1], string(escaped[1 : len(escaped)-1])}
}

func (u *secretsUsed) byLength() []string {
	names := make([]string, 0, len(u.values))
	for name := range u.values {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return len(u.values[names[i]]) > len(u.values[names[j]]) })
	return names
}

// redactedError is an error whose text has the secrets' values replaced;
// it unwraps to the error, so that its kind (permanent, retry after) is
// kept.
type redactedError struct {
	err  error
	text string
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

// redactError returns err with the secrets' values taken out of its text.
func (u *secretsUsed) redactError(err error) error {
	if err == nil || u == nil || len(u.values) == 0 {
		return err
	}
	text := u.redact(err.Error())
	if text == err.Error() {
		return err
	}
	return &redactedError{err: err, text: text}
}
