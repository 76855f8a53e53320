package processes_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sagaengine/saga/processes"
)

func TestValidTraceParent(t *testing.T) {
	for s, want := range map[string]bool{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": true,
		"": false,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":                              false, // uppercase
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":                              false, // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":                              false, // zero span id
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":                              false, // unknown version
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g":                              false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + strings.Repeat("x", 4<<20): false,
	} {
		assert.Equal(t, want, processes.ValidTraceParent(s), "%.70q", s)
	}
	assert.True(t, processes.ValidTraceParent(processes.NewTraceParent()))
	child := processes.ChildTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	assert.True(t, processes.ValidTraceParent(child))
	assert.True(t, strings.HasPrefix(child, "00-4bf92f3577b34da6a3ce929d0e0e4736-"))
	assert.True(t, processes.ValidTraceParent(processes.ChildTraceParent(strings.Repeat("0", 9<<20))))
}
