package kafka

import "time"

// SetIdleWorkerLife sets how long idle consume workers wait, until the
// returned function restores it.
func SetIdleWorkerLife(d time.Duration) (restore func()) {
	old := idleWorkerLife
	idleWorkerLife = d
	return func() { idleWorkerLife = old }
}
