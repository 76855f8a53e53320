package processes

import (
	"math/rand/v2"
	"strconv"
	"time"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Backoff is an exponential backoff with jitter.
type Backoff struct {
	Initial    time.Duration
	Multiplier float64
	Max        time.Duration
	// Jitter is the fraction of each wait that is random, from 0 to 1.
	Jitter float64
}

// DefaultBackoff starts at 50 ms and doubles up to 2 s, half of it random.
var DefaultBackoff = Backoff{Initial: 50 * time.Millisecond, Multiplier: 2, Max: 2 * time.Second, Jitter: 0.5}

// Wait returns how long to wait before retry number n (from 1).
func (b Backoff) Wait(n int) time.Duration {
	d := float64(b.Initial)
	for i := 1; i < n; i++ {
		d *= b.Multiplier
		if d >= float64(b.Max) {
			d = float64(b.Max)
			break
		}
	}
	jitter := d * b.Jitter
	return time.Duration(d - jitter + rand.Float64()*jitter)
}
