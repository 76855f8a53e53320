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

// TestDemoKeyRetentionIsShownAndChecked: sagad -h shows
// --demo-key-retention with its bounded default (the demo services keep
// their keys in sagad's own heap), and a retention that is not positive is
// refused before anything starts.
func TestDemoKeyRetentionIsShownAndChecked(t *testing.T) {
	var out bytes.Buffer
	before := helpOutput
	helpOutput = &out
	defer func() { helpOutput = before }()
	err := runAll(context.Background(), []string{"-h"}, slog.New(slog.DiscardHandler))
	require.ErrorIs(t, err, flag.ErrHelp)
	assert.Regexp(t, `-demo-key-retention duration\n[^\n]*this process's memory[^\n]*\(default 2m0s\)`, out.String())

	err = runAll(context.Background(), []string{"--data", t.TempDir(), "--demo-key-retention", "0s"}, slog.New(slog.DiscardHandler))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--demo-key-retention must be positive")
}
