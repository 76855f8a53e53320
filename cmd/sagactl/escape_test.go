package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
)

// hostileBody is an error body a remote service might answer: it sets the
// terminal's title, clears the screen and rings the bell.
const hostileBody = "\x1b]0;owned\x07\x1b[2Jcard refused\u009b31m"

// TestServiceTextIsEscapedOnTheTerminal runs a task whose HTTP step's
// service answers hostileBody, so that it reaches the task's reason, its
// statuses and its alert: submit --wait, get, tasks and alerts print it
// escaped, as deadletters does, never raw.
func TestServiceTextIsEscapedOnTheTerminal(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(hostileBody))
	}))
	t.Cleanup(srv.Close)
	w, err := domain.ParseDefinition([]byte(`{"name":"hostile","steps":[{"name":"call","http":{"url":"` + srv.URL + `/charge"},
		"budget":"5s","attempts":1,"onExhausted":"error"}]}`))
	require.NoError(t, err)
	s := startSaga(t, engine.Config{Workflows: append(testWorkflows(5e9), w)})

	check := func(args []string, all string) {
		t.Helper()
		assert.Contains(t, all, "card refused", "%v shows the reason:\n%s", args, all)
		assert.NotContains(t, all, "\x1b", "%v", args)
		assert.NotContains(t, all, "\x07", "%v", args)
		assert.NotContains(t, all, "\u009b", "%v", args)
		assert.True(t, strings.Contains(all, `\x1b`) || strings.Contains(all, `\u001b`), "%v shows the escape escaped:\n%s", args, all)
	}
	submit := []string{"submit", "esc-1", "--workflow", "hostile", "--wait", "--timeout", "30s"}
	out, errOut, code := s.run(submit...)
	assert.Equal(t, exitFailed, code)
	check(submit, out+errOut)
	s.awaitStates(map[string]domain.TaskState{"esc-1": domain.StateError})
	for _, args := range [][]string{
		{"get", "esc-1"},
		{"tasks"},
		{"alerts"},
	} {
		out, errOut, _ := s.run(args...)
		check(args, out+errOut)
	}
}
