//go:build !unix

package eventstore_test

import "time"

// cpuTime is not measured here: benchmarks report zero CPU per append.
func cpuTime() time.Duration { return 0 }
