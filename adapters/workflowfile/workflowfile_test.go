package workflowfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/workflowfile"
	"github.com/sagaengine/saga/domain"
)

// text drops the first newline, so that line 1 of a file is the line after
// the opening backquote.
func text(s string) []byte { return []byte(strings.TrimPrefix(s, "\n")) }

func definitionError(t *testing.T, err error) *domain.DefinitionError {
	t.Helper()
	require.Error(t, err)
	var de *domain.DefinitionError
	require.True(t, errors.As(err, &de), "%v", err)
	assert.True(t, errors.Is(err, domain.ErrInvalidWorkflow))
	return de
}

// lines maps each problem's path to its line.
func lines(problems []domain.Problem) map[string]int {
	out := map[string]int{}
	for _, p := range problems {
		out[p.Path] = p.Line
	}
	return out
}

const signup = `
name: signup
description: Create an account and say welcome.
steps:
  - name: create-account
    agent: accounts
    compensation: delete-account
  - name: send-welcome
    http:
      url: https://mail.example/send/{{order.email}}
`

func TestParseYAML(t *testing.T) {
	w, err := workflowfile.Parse("signup.yaml", text(signup))
	require.NoError(t, err)
	assert.Equal(t, "signup", w.Name)
	require.Len(t, w.Steps, 2)
	assert.Equal(t, "accounts", w.Steps[0].Agent)
	assert.Equal(t, "delete-account", w.Steps[0].Compensation.Action)
	assert.Equal(t, domain.HTTPAgent, w.Steps[1].Agent)
	assert.Equal(t, domain.DefaultStepBudget, w.Steps[1].Budget)
}

func TestEveryProblemIsListedWithItsLine(t *testing.T) {
	_, err := workflowfile.Parse("flows/bad.yml", text(`
name: bad
steps:
  - name: create
    agent: accounts
    retries: 3
  - name: mail
    agent: mail
    budget: -1s
  - name: create
    agent: other
  - name: charge
    http:
      url: http://pay.example/charge
      headers:
        X-Customer: "{{ order.customer.id }}"
      body:
        customer:
          id: "{{order.customer.id}}"
          items:
            - sku: "{{ results.nope.sku }}"
    compensation:
      action: refund
      attempts: 0
`))
	de := definitionError(t, err)
	assert.Equal(t, "flows/bad.yml", de.Source)
	assert.Equal(t, map[string]int{
		"steps[0].retries":               5, // unknown field: the key's line
		"steps[1].budget":                8,
		"steps[2].name":                  9,
		"steps[3].http.body":             20, // the string holding the placeholder
		"steps[3].compensation.attempts": 23,
	}, lines(de.Problems), "%v", de)
	assert.Contains(t, de.Error(), "flows/bad.yml: 5 problem(s)")
	assert.Contains(t, de.Error(), "line 20: steps[3].http.body: {{results.nope.sku}}")
}

func TestMissingFieldTakesTheParentLine(t *testing.T) {
	_, err := workflowfile.Parse("x.yaml", text(`
name: x
steps:
  - budget: 1s
    agent: a
`))
	de := definitionError(t, err)
	assert.Equal(t, map[string]int{"steps[0].name": 3}, lines(de.Problems))
}

func TestJSONFiles(t *testing.T) {
	w, err := workflowfile.Parse("signup.JSON", text(`{"name":"signup","steps":[{"name":"a","agent":"b"}]}`))
	require.NoError(t, err)
	assert.Equal(t, "signup", w.Name)

	_, err = workflowfile.Parse("signup.json", text(`
{
  "name": "signup",
  "steps": [
    {"name": "a", "agent": "b",
     "colour": "red"}
  ]
}`))
	de := definitionError(t, err)
	assert.Equal(t, map[string]int{"steps[0].colour": 5}, lines(de.Problems))

	_, err = workflowfile.Parse("broken.json", text(`
{
  "name": "signup",
  "steps": [,]
}`))
	de = definitionError(t, err)
	require.Len(t, de.Problems, 1)
	assert.Equal(t, 3, de.Problems[0].Line)
	assert.Contains(t, de.Problems[0].Message, "not valid JSON: invalid character ','")

	_, err = workflowfile.Parse("trailing.json", text(`{"name":"x","steps":[{"name":"a","agent":"b"}]} {}`))
	definitionError(t, err)
}

func TestPlainYAMLOnly(t *testing.T) {
	cases := map[string]struct {
		file, want string
		line       int
	}{
		"anchor": {`
name: x
defaults: &d
  budget: 1s
steps:
  - {name: a, agent: b}
`, "anchors (&d) are not supported", 2},
		"alias": {`
name: x
steps:
  - name: a
    agent: &b b
  - name: c
    agent: *b
`, "aliases (*b) are not supported", 6},
		"merge key": {`
name: x
steps:
  - name: a
    agent: b
    <<: {budget: 1s}
`, "merge keys (<<) are not supported", 5},
		"non-string key": {`
name: x
steps:
  - name: a
    http:
      url: http://x.example
      headers:
        200: ok
`, `mapping keys must be strings: quote "200"`, 7},
		"custom tag": {`
name: !Sub x
steps: []
`, "tags such as !Sub are not supported", 1},
		"repeated key": {`
name: x
steps: []
name: y
`, `"name" is given twice (first on line 1)`, 3},
		"two documents": {`
name: x
steps: []
---
name: y
`, "one workflow", 3},
		"syntax": {`
name: x
steps:
  - name: a
   agent: b
`, "not valid YAML", -1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := workflowfile.Parse("plain.yaml", text(tc.file))
			de := definitionError(t, err)
			found := false
			for _, p := range de.Problems {
				if strings.Contains(p.Message, tc.want) {
					found = true
					if tc.line > 0 {
						assert.Equal(t, tc.line, p.Line, "%v", de)
					} else {
						assert.Positive(t, p.Line, "%v", de)
					}
				}
			}
			assert.True(t, found, "no problem says %q: %v", tc.want, de)
		})
	}
}

func TestBillionLaughsIsRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: x\nsteps: []\nlol0: &l0 [lol]\n")
	for i := 1; i < 10; i++ {
		b.WriteString("lol" + string(rune('0'+i)) + ": &l" + string(rune('0'+i)) + " [")
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*l" + string(rune('0'+i-1)))
		}
		b.WriteString("]\n")
	}
	start := time.Now()
	_, err := workflowfile.Parse("lol.yaml", []byte(b.String()))
	definitionError(t, err)
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestLimits(t *testing.T) {
	big := append(text(signup), []byte("# "+strings.Repeat("x", workflowfile.MaxFileBytes)+"\n")...)
	de := definitionError(t, func() error { _, err := workflowfile.Parse("big.yaml", big); return err }())
	assert.Contains(t, de.Problems[0].Message, "over the limit")

	de = definitionError(t, func() error { _, err := workflowfile.Parse("empty.yaml", []byte("\n")); return err }())
	assert.Contains(t, de.Problems[0].Message, "empty")

	de = definitionError(t, func() error { _, err := workflowfile.Parse("c.yaml", []byte("# nothing yet\n")); return err }())
	assert.Contains(t, de.Problems[0].Message, "only comments")

	_, err := workflowfile.Parse("signup.txt", text(signup))
	assert.True(t, errors.Is(err, workflowfile.ErrUnsupportedFile))
}

func TestNumbersAndStrings(t *testing.T) {
	w, err := workflowfile.Parse("n.yaml", text(`
name: n
defaults:
  attempts: 0x4
  backoff: {initial: 100ms, multiplier: 1.5, max: 1s, jitter: 0}
steps:
  - name: a
    http:
      method: put
      url: "https://callback.example/{{order.callback}}"
      body: {amount: 12.50, big: 123456789012345678901234567890, on: yes, when: 2026-01-02, none: null, list: [1, two]}
`))
	require.NoError(t, err)
	s := w.Steps[0]
	assert.Equal(t, 4, s.MaxAttempts)
	assert.Equal(t, 1.5, s.Backoff.Multiplier)
	assert.Equal(t, "PUT", s.HTTP.Method)
	assert.JSONEq(t, `{"amount":12.5,"big":123456789012345678901234567890,"on":"yes","when":"2026-01-02","none":null,"list":[1,"two"]}`, string(s.HTTP.Body))
}

func TestFormatReadsBack(t *testing.T) {
	for _, file := range []string{signup, `
name: full
description: "Everything: a trigger, defaults, http and compensations."
trigger:
  topics: [shop.events]
  type: checkout.completed
  typeField: /type
  idField: /checkout/id
defaults:
  budget: 3s
  onExhausted: error
steps:
  - name: reserve
    agent: inventory
    compensation: {action: release, attempts: 2}
  - name: charge
    budget: 20s
    http:
      method: POST
      url: https://pay.example/charges?ref={{task.id}}
      headers: {Authorization: "Bearer {{order.token}}", X-Try: "{{attempt}}"}
      body: {amount: "{{order.total}}", "true": "true", "123": "{{results.reserve}}"}
      transientStatus: [409]
    compensation:
      http:
        method: DELETE
        url: https://pay.example/charges/{{result.id}}
`} {
		w, err := workflowfile.Parse("in.yaml", text(file))
		require.NoError(t, err)
		out, err := workflowfile.Format(w)
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(string(out), "name: "), "%s", out)
		back, err := workflowfile.Parse("out.yaml", out)
		require.NoError(t, err, "%s", out)
		assert.True(t, w.Equal(back), "%s", out)
	}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), text(content), 0o600))
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "b-signup.yaml", signup)
	write(t, dir, "a-order.json", `{"name":"order","steps":[{"name":"reserve","agent":"inventory"}]}`)
	write(t, dir, "notes.md", "not a definition")
	write(t, dir, ".hidden.yaml", "not: [valid")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o700))

	ws, err := workflowfile.LoadDir(dir)
	require.NoError(t, err)
	require.Len(t, ws, 2)
	assert.Equal(t, "order", ws[0].Name, "files are read in order of name")
	assert.Equal(t, "signup", ws[1].Name)

	write(t, dir, "c-broken.yml", `
name: broken
steps:
  - name: a
    agent: b
    budget: soon
`)
	ws, err = workflowfile.LoadDir(dir)
	assert.Nil(t, ws)
	var dirErr *workflowfile.DirError
	require.True(t, errors.As(err, &dirErr), "%v", err)
	require.Len(t, dirErr.Problems(), 1, "%v", err)
	de := definitionError(t, err)
	assert.Equal(t, filepath.Join(dir, "c-broken.yml"), de.Source)
	assert.Equal(t, map[string]int{"steps[0].budget": 5}, lines(de.Problems))
	assert.Contains(t, err.Error(), "c-broken.yml")
	assert.NotContains(t, err.Error(), "b-signup.yaml")
	assert.NotContains(t, err.Error(), "a-order.json")
}

func TestLoadDirCombinesEveryFile(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", signup)
	write(t, dir, "b.yaml", "name: b\nsteps: []\n")
	write(t, dir, "c.yaml", "\n\nname: signup\nsteps: [{name: x, agent: y}]\n")
	write(t, dir, "d.json", "{")
	_, err := workflowfile.LoadDir(dir)
	var dirErr *workflowfile.DirError
	require.True(t, errors.As(err, &dirErr), "%v", err)
	des := dirErr.Problems()
	require.Len(t, des, 3, "%v", err)
	assert.Equal(t, filepath.Join(dir, "b.yaml"), des[0].Source)
	assert.Equal(t, filepath.Join(dir, "c.yaml"), des[1].Source)
	assert.Equal(t, []domain.Problem{{Path: "name", Line: 2, Message: `workflow "signup" is already defined in ` + filepath.Join(dir, "a.yaml")}}, des[1].Problems)
	assert.Equal(t, filepath.Join(dir, "d.json"), des[2].Source)
}

func TestLoadDirMissing(t *testing.T) {
	_, err := workflowfile.LoadDir(filepath.Join(t.TempDir(), "none"))
	require.Error(t, err)
	assert.True(t, errors.Is(err, os.ErrNotExist))
}
