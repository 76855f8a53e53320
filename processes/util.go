package processes

import (
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/sagaengine/saga/domain"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// DefaultBackoff spaces an agent's retries and a consumer's redeliveries:
// from 50 ms, doubling up to 2 s, half of each wait random.
var DefaultBackoff = domain.Backoff{Initial: 50 * time.Millisecond, Multiplier: 2, Max: 2 * time.Second, Jitter: 0.5}

// wait returns how long to wait before retry n (from 1) with fresh jitter.
func wait(b domain.Backoff, n int) time.Duration { return b.Delay(n, rand.Float64()) }
