package main

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHelpListsTheLimits: sagad -h names every limit with its default, the
// ones flags set and the ones none does, and ends without an error.
func TestHelpListsTheLimits(t *testing.T) {
	var out bytes.Buffer
	before := helpOutput
	helpOutput = &out
	defer func() { helpOutput = before }()
	err := runAll(context.Background(), []string{"-h"}, slog.New(slog.DiscardHandler))
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, want := range []string{
		"-max-order-size int", "(default 1048576)",
		"-task-view-batch int", "(default 512)",
		"-supervisor-interval duration", "(default 1s)",
		"-checkpoint-every duration", "(default 5s)",
		"-agent-capacity value", "-agent-capacity-default int", "(default 1024)",
		"-agent-rate value", "-agent-global-limit value",
		"-agent-hang-after value", "-agent-hang-after-default duration", "(default 2s)",
		"-http-agent-allow value", "-secrets-dir string",
		"order id                    200 characters",
		"steps of a workflow         100",
		"a step's result             65536 bytes",
		"a workflow definition file  1048576 bytes",
		"conflicts per decision      10",
		"'sagad eventstore -h'",
	} {
		assert.Contains(t, out.String(), want)
	}
}
