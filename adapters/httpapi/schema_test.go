package httpapi_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

const schemaFile = "../../docs/task.schema.json"

// busyTask has every field of the view set somewhere: a step undone after
// a timeout, one in flight, one pending (domain/protocol's example task).
func busyTask(t *testing.T) *protocol.TaskView {
	data, err := os.ReadFile("../../domain/protocol/testdata/task-before-view-types.json")
	require.NoError(t, err)
	var v protocol.TaskView
	require.NoError(t, json.Unmarshal(data, &v))
	return &v
}

// TestServedTasksMatchTheSchema validates what GET /api/tasks/{id} and GET
// /api/tasks serve against docs/task.schema.json.
func TestServedTasksMatchTheSchema(t *testing.T) {
	v := newView(t)
	high := busyTask(t)
	high.ID, high.Priority = "o-2", domain.PriorityHigh
	require.NoError(t, v.Commit(context.Background(), []*protocol.TaskView{busyTask(t), high}, 1))
	srv := httptest.NewServer(httpapi.Handler(httpapi.Config{Tasks: v, Metrics: checks{}, Readiness: checks{}}))
	defer srv.Close()

	c := jsonschema.NewCompiler()
	c.AssertFormat()
	task, err := c.Compile(schemaFile)
	require.NoError(t, err)
	list, err := c.Compile(schemaFile + "#/$defs/taskList")
	require.NoError(t, err)
	for path, schema := range map[string]*jsonschema.Schema{"/api/tasks/o-1": task, "/api/tasks": list, "/api/tasks?state=Processed": list, "/api/tasks/o-2": task, "/api/tasks?priority=high": list} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		doc, err := jsonschema.UnmarshalJSON(resp.Body)
		resp.Body.Close()
		require.NoError(t, err, path)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.NoError(t, schema.Validate(doc), path)
	}

	// The schema refuses what the API must not serve.
	for _, bad := range []string{`{"id":"o-1"}`, strings.Replace(mustJSON(t, busyTask(t)), `"state":"Compensating"`, `"state":"Lost"`, 1),
		strings.Replace(mustJSON(t, busyTask(t)), `"id":`, `"extra":1,"id":`, 1),
		strings.Replace(mustJSON(t, busyTask(t)), `"lockedBy":"s-1"`, `"lockedBy":"s-1","nope":true`, 1),
		strings.Replace(mustJSON(t, high), `"priority":"high"`, `"priority":"urgent"`, 1)} {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(bad))
		require.NoError(t, err)
		assert.Error(t, task.Validate(doc), bad)
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// schemaObject is the part of the schema this test reads.
type schemaObject struct {
	Required   []string                   `json:"required"`
	Properties map[string]json.RawMessage `json:"properties"`
	Ref        string                     `json:"$ref"`
	Defs       map[string]schemaObject    `json:"$defs"`
}

// fields lists the JSON names of a struct's fields (those of embedded
// structs too) and those that are always present.
func fields(t reflect.Type) (all, required []string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			a, r := fields(f.Type)
			all, required = append(all, a...), append(required, r...)
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		all = append(all, name)
		if !strings.Contains(opts, "omitempty") {
			required = append(required, name)
		}
	}
	sort.Strings(all)
	sort.Strings(required)
	return all, required
}

// TestSchemaNamesTheFieldsOfTheViewTypes keeps docs/task.schema.json and the
// Go types from drifting apart: every object has the same fields, and the
// same required ones (those never left out), in both.
func TestSchemaNamesTheFieldsOfTheViewTypes(t *testing.T) {
	data, err := os.ReadFile(schemaFile)
	require.NoError(t, err)
	var root schemaObject
	require.NoError(t, json.Unmarshal(data, &root))
	leg := root.Defs["leg"]
	step := root.Defs["step"]
	require.Equal(t, "#/$defs/leg", step.Ref, "a step is a leg with more")
	props := maps.Clone(leg.Properties)
	maps.Copy(props, step.Properties)
	step.Properties = props
	step.Required = append(append([]string{}, leg.Required...), step.Required...)
	for _, c := range []struct {
		schema schemaObject
		typ    any
	}{{root, protocol.TaskView{}}, {step, protocol.StepView{}}, {leg, protocol.LegView{}}, {root.Defs["taskList"], protocol.TaskList{}}} {
		all, required := fields(reflect.TypeOf(c.typ))
		names := make([]string, 0, len(c.schema.Properties))
		for k := range c.schema.Properties {
			names = append(names, k)
		}
		sort.Strings(names)
		sort.Strings(c.schema.Required)
		assert.Equal(t, all, names, "the fields of %T", c.typ)
		assert.Equal(t, required, c.schema.Required, "the required fields of %T", c.typ)
	}
}
