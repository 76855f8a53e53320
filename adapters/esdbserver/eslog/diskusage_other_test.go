//go:build !unix

package eslog_test

import "os"

func allocated(info os.FileInfo) int64 { return info.Size() }
