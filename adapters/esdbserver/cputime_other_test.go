//go:build !unix

package esdbserver_test

import "time"

// cpuTime is not measured here: benchmarks report zero CPU per event.
func cpuTime() time.Duration { return 0 }
