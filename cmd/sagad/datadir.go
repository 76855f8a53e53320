package main

import (
	"os"
	"path/filepath"
)

// defaultDataDir is where sagad keeps its state when --data is not given:
// $SAGA_DATA, else the user's data directory, else ./saga-data.
func defaultDataDir(sub string) string {
	base := os.Getenv("SAGA_DATA")
	if base == "" {
		if dir, err := os.UserHomeDir(); err == nil {
			base = filepath.Join(dir, ".local", "share", "saga")
		} else {
			base = "saga-data"
		}
	}
	return filepath.Join(base, sub)
}
