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
		"-max-rendered-size int", "(default 2097152)",
		"placeholders of an HTTP call 256",
		"-task-view-batch int", "(default 512)",
		"-supervisor-interval duration", "(default 1s)",
		"-checkpoint-every duration", "(default 5s)",
		"-agent-capacity value", "-agent-capacity-default int", "(default 1024)",
		"-agent-rate value", "-agent-global-limit value",
		"-agent-hang-after value", "-agent-hang-after-default duration", "(default 2s)",
		"-http-agent-allow value", "-secrets-dir string",
		"-kafka-compression string", "(default \"auto\")",
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

// TestMalformedConnectionStringNeverShowsItsPassword gives sagad event
// store connection strings a URL parser misreads (an unencoded # or space
// in the password, esdb:/): neither -h, which shows $SAGA_EVENTSTORE as the
// default, nor the error sagad stops with shows the password.
func TestMalformedConnectionStringNeverShowsItsPassword(t *testing.T) {
	for _, connection := range []string{
		"esdb://admin:hun#ter2@127.0.0.1:1?tls=false",
		"esdb://admin:hun ter2@127.0.0.1:1?tls=false",
		"esdb:/admin:hunter2@127.0.0.1:1?tls=false",
	} {
		t.Setenv("SAGA_EVENTSTORE", connection)
		var out bytes.Buffer
		before := helpOutput
		helpOutput = &out
		err := runAll(context.Background(), []string{"-h"}, slog.New(slog.DiscardHandler))
		helpOutput = before
		require.ErrorIs(t, err, flag.ErrHelp)
		assert.Contains(t, out.String(), "admin:xxxxx@")
		assert.NotContains(t, out.String(), "hun", connection)

		err = runAll(context.Background(), []string{"--data", t.TempDir(), "--demo-agents=false", "--http-listen", "127.0.0.1:0",
			"--kafka-listen", "127.0.0.1:0", "--eventstore", connection}, slog.New(slog.DiscardHandler))
		require.Error(t, err, connection)
		assert.NotContains(t, err.Error(), "hun", connection)
		assert.NotContains(t, err.Error(), "ter2", connection)
	}
}
