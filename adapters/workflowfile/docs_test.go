package workflowfile_test

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/workflowfile"
	"github.com/sagaengine/saga/domain"
)

// schemaObject is the part of a JSON Schema object this test reads.
type schemaObject struct {
	Schema     string                     `json:"$schema"`
	Properties map[string]json.RawMessage `json:"properties"`
	Defs       map[string]schemaObject    `json:"$defs"`
}

func (o schemaObject) names() []string {
	out := make([]string, 0, len(o.Properties))
	for k := range o.Properties {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var knownFields = regexp.MustCompile(`unknown field \(known: ([^)]*)\)`)

// parserFields asks the parser which fields it knows at a place in the
// document: doc has an unknown field "zz" there, and the problem about it
// lists the known ones.
func parserFields(t *testing.T, doc string) []string {
	t.Helper()
	_, err := domain.ParseDefinition([]byte(doc))
	for _, p := range domain.ProblemsOf(err) {
		if strings.HasSuffix(p.Path, "zz") {
			m := knownFields.FindStringSubmatch(p.Message)
			require.NotNil(t, m, "%v", p)
			out := strings.Split(m[1], ", ")
			sort.Strings(out)
			return out
		}
	}
	t.Fatalf("no unknown-field problem for %s: %v", doc, err)
	return nil
}

// TestSchemaMatchesTheParser keeps docs/workflow.schema.json and the
// parser from drifting apart: every object of the document has the same
// fields in both.
func TestSchemaMatchesTheParser(t *testing.T) {
	data, err := os.ReadFile("../../docs/workflow.schema.json")
	require.NoError(t, err)
	var schema schemaObject
	require.NoError(t, json.Unmarshal(data, &schema), "the schema is not valid JSON")
	assert.Equal(t, "https://json-schema.org/draft/2020-12/schema", schema.Schema)

	places := []struct {
		def, doc string
	}{
		{"", `{"zz":1}`},
		{"trigger", `{"trigger":{"zz":1}}`},
		{"retention", `{"retention":{"zz":1}}`},
		{"defaults", `{"defaults":{"zz":1}}`},
		{"backoff", `{"defaults":{"backoff":{"zz":1}}}`},
		{"step", `{"steps":[{"zz":1}]}`},
		{"http", `{"steps":[{"http":{"zz":1}}]}`},
		{"compensation", `{"steps":[{"compensation":{"zz":1}}]}`},
		{"delay", `{"steps":[{"delay":{"zz":1}}]}`},
	}
	for _, p := range places {
		obj := schema
		if p.def != "" {
			var ok bool
			obj, ok = schema.Defs[p.def]
			require.True(t, ok, "the schema has no $defs/%s", p.def)
		}
		assert.Equal(t, parserFields(t, p.doc), obj.names(), "fields of %q", p.def)
	}
}

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestDocumentedExamplesParse keeps docs/workflows.md true: every YAML
// example that is a whole workflow (it starts with name:) is valid.
func TestDocumentedExamplesParse(t *testing.T) {
	data, err := os.ReadFile("../../docs/workflows.md")
	require.NoError(t, err)
	examples := 0
	for _, m := range yamlBlock.FindAllStringSubmatch(string(data), -1) {
		if !strings.HasPrefix(m[1], "name:") {
			continue
		}
		examples++
		_, err := workflowfile.Parse("example.yaml", []byte(m[1]))
		assert.NoError(t, err, "%s", m[1])
	}
	assert.GreaterOrEqual(t, examples, 5)
}

func TestDemoWorkflowParses(t *testing.T) {
	data, err := os.ReadFile("../demo/order.json")
	require.NoError(t, err)
	w, err := workflowfile.Parse("order.json", data)
	require.NoError(t, err)
	assert.Equal(t, domain.DefaultWorkflow, w.Name)
}
