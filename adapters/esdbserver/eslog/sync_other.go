//go:build !linux

package eslog

import "os"

func fdatasync(f *os.File) error { return f.Sync() }
