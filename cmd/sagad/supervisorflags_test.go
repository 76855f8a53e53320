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

// TestSupervisorStoreTimeoutIsShownAndChecked: sagad -h shows
// --supervisor-store-timeout with its default, and a timeout shorter than
// the scan interval is refused before anything starts; unset, it is never
// shorter than the interval.
func TestSupervisorStoreTimeoutIsShownAndChecked(t *testing.T) {
	var out bytes.Buffer
	before := helpOutput
	helpOutput = &out
	defer func() { helpOutput = before }()
	err := runAll(context.Background(), []string{"-h"}, slog.New(slog.DiscardHandler))
	require.ErrorIs(t, err, flag.ErrHelp)
	assert.Regexp(t, `-supervisor-store-timeout duration\n[^\n]*gives up its lease[^\n]*\(default 5s\)`, out.String())

	err = runAll(context.Background(), []string{"--data", t.TempDir(), "--supervisor-interval", "2s", "--supervisor-store-timeout", "1s"},
		slog.New(slog.DiscardHandler))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--supervisor-store-timeout must be at least --supervisor-interval")
}
