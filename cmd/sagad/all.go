package main

import (
	"context"
	"log/slog"

	"github.com/cockroachdb/errors"
)

func runAll(ctx context.Context, args []string, logger *slog.Logger) error {
	return errors.New("the all-in-one mode is not built yet; run 'sagad eventstore'")
}
