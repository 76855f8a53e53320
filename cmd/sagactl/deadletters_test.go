package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// TestDeadLettersListAndRedrive dead-letters three orders: one naming a
// workflow not registered yet, one that is not JSON, one of binary bytes.
// The list shows each with its reason and source, the binary one escaped
// (and in base64 with -o json). After the workflow is registered, a
// redrive by reason starts the first order's task; a second redrive of it
// is acknowledged by the submitter as a duplicate. The text order is
// redriven with a fixed payload. The binary one, redriven unfixed, is
// dead-lettered again, naming the dead letter it came from, and a redrive
// by filter then passes over the older copy.
func TestDeadLettersListAndRedrive(t *testing.T) {
	s := startSaga(t, engine.Config{Workflows: testWorkflows(time.Second)})
	binary := []byte{0x00, 0xff, 0xfe, 'o', 'k', 0x1b, '[', '2', 'J', '\n'}
	s.publish(protocol.OrdersTopic, order("d-1", `{"orderId":"d-1","workflow":"signup"}`), order("d-2", `not json`),
		&kgo.Record{Key: []byte("d-3"), Value: binary})

	var letters []*deadLetter
	require.Eventually(t, func() bool {
		s.runJSON(&letters, "deadletters")
		return len(letters) == 3
	}, 30*time.Second, 100*time.Millisecond)
	byKey := map[string]*deadLetter{}
	for _, d := range letters {
		byKey[d.Key] = d
		assert.Equal(t, protocol.OrdersTopic, d.SourceTopic, d.Key)
		require.NotNil(t, d.SourceOffset, d.Key)
		assert.NotEmpty(t, d.Reason, d.Key)
	}
	assert.Contains(t, byKey["d-1"].Reason, "signup")
	require.NotNil(t, byKey["d-2"].Value)
	assert.Equal(t, "not json", *byKey["d-2"].Value)
	assert.Nil(t, byKey["d-3"].Value, "binary is not shown as text")
	assert.Equal(t, "AP/+b2sbWzJKCg==", byKey["d-3"].ValueBase64)
	out, _, code := s.run("deadletters", "--key", "d-3")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, `\x00\xff\xfeok\x1b[2J\n`)
	assert.NotContains(t, out, "\x1b", "no terminal escape reaches the screen")
	s.runJSON(&letters, "deadletters", "--source-topic", "saga.replies")
	assert.Empty(t, letters)

	var plan bulkReport
	s.runJSON(&plan, "deadletters", "redrive", "--reason-contains", "SIGNUP", "--dry-run")
	require.Equal(t, 1, plan.Matched)
	_, _, err := s.app.Workflows.Apply(context.Background(), &domain.Workflow{Name: "signup", Steps: testWorkflows(time.Second)[1].Steps}, "test")
	require.NoError(t, err)
	var done bulkReport
	s.runJSON(&done, "deadletters", "redrive", "--reason-contains", "signup")
	require.Equal(t, 1, done.Succeeded, "%+v", done)
	s.awaitStates(map[string]domain.TaskState{"d-1": domain.StateProcessed})
	duplicates := s.app.Submitter.Stats().Duplicates
	s.runJSON(&done, "deadletters", "redrive", byKey["d-1"].ID)
	require.Equal(t, 1, done.Succeeded)
	require.Eventually(t, func() bool { return s.app.Submitter.Stats().Duplicates == duplicates+1 }, 30*time.Second, 20*time.Millisecond,
		"the order redriven twice is one task: the submitter acknowledges the second as a duplicate")

	fixed := filepath.Join(t.TempDir(), "fixed.json")
	require.NoError(t, os.WriteFile(fixed, []byte(`{"orderId":"d-2","workflow":"quick"}`), 0o600))
	_, errOut, code := s.run("deadletters", "redrive", "--source-topic", "orders", "--value-file", fixed, "--yes")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "--value-file replaces the payload of one dead letter; 3 are selected")
	s.runJSON(&done, "deadletters", "redrive", byKey["d-2"].ID, "--value-file", fixed)
	require.Equal(t, 1, done.Succeeded)
	s.awaitStates(map[string]domain.TaskState{"d-2": domain.StateProcessed})

	s.runJSON(&done, "deadletters", "redrive", byKey["d-3"].ID)
	require.Equal(t, 1, done.Succeeded)
	require.Eventually(t, func() bool {
		s.runJSON(&letters, "deadletters", "--key", "d-3")
		return len(letters) == 2
	}, 30*time.Second, 100*time.Millisecond, "the unfixed binary order is dead-lettered again")
	assert.Equal(t, byKey["d-3"].ID, letters[0].RedriveOf, "the newer copy names the one it was redriven from")
	_, errOut, code = s.run("deadletters", "redrive", "--key", "d-3", "--dry-run")
	require.Equal(t, 0, code)
	assert.Contains(t, errOut, "passed over 1 dead letters redriven before")

	for _, hostile := range [][]string{
		{"deadletters", "redrive"},            // nothing chosen
		{"deadletters", "redrive", "x/y"},     // not an id
		{"deadletters", "redrive", "0/99999"}, // no such dead letter
		{"deadletters", "--since", "never"},
	} {
		_, errOut, code := s.run(hostile...)
		assert.Equal(t, 1, code, "%v: %s", hostile, errOut)
	}
}
