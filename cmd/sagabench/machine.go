package main

import (
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// machineTimes are the whole machine's cumulative CPU seconds, summed
// over its CPUs, from /proc/stat: busy (user, system, interrupts) and
// stolen by the hypervisor. ok is false where there is no /proc/stat.
type machineTimes struct {
	busy, steal float64
	ok          bool
}

// readMachineTimes reads /proc/stat's first line.
func readMachineTimes() machineTimes {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTimes{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return machineTimes{}
	}
	tick := func(i int) float64 {
		v, _ := strconv.ParseFloat(f[i], 64)
		return v / clockTicksPerSecond
	}
	return machineTimes{busy: tick(1) + tick(2) + tick(3) + tick(6) + tick(7), steal: tick(8), ok: true}
}

// clockTicksPerSecond is USER_HZ, the unit of /proc/stat, which Linux
// fixes at 100 for user space on every architecture.
const clockTicksPerSecond = 100

// Calibration is how fast the machine did a fixed piece of work, one
// thread, before the run and after it, nothing else of the benchmark
// running: when the whole system slows down late in a run, it tells a
// slower machine (a busy host, a throttled CPU) from a slower saga.
type Calibration struct {
	// ComputeMicros is the best of several runs hashing 4 MiB with
	// SHA-256; MemoryMicros the best of several runs of 2^18 dependent
	// reads at random places of 64 MiB (cache and memory latency).
	StartComputeMicros float64 `json:"startComputeMicros"`
	StartMemoryMicros  float64 `json:"startMemoryMicros"`
	EndComputeMicros   float64 `json:"endComputeMicros"`
	EndMemoryMicros    float64 `json:"endMemoryMicros"`
}

// calibrationTries is how many times each piece of work runs; the fastest
// counts, so that a stray interruption does not.
const calibrationTries = 7

// calibrate times the two pieces of work.
func calibrate() (compute, memory float64) {
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	compute = best(func() { _ = sha256.Sum256(buf) })
	// One random cycle through 64 MiB of indices (Sattolo's shuffle):
	// each read depends on the one before, so neither the CPU nor the
	// compiler can overlap them.
	next := make([]uint32, 16<<20)
	for i := range next {
		next[i] = uint32(i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := len(next) - 1; i > 0; i-- {
		j := rng.IntN(i)
		next[i], next[j] = next[j], next[i]
	}
	var sink uint32
	memory = best(func() {
		j := uint32(0)
		for range 1 << 18 {
			j = next[j]
		}
		sink += j
	})
	_ = sink
	// The buffers are garbage now: give them back before the run.
	buf, next = nil, nil
	debug.FreeOSMemory()
	return compute, memory
}

func best(work func()) float64 {
	fastest := time.Duration(1<<63 - 1)
	for range calibrationTries {
		t0 := time.Now()
		work()
		fastest = min(fastest, time.Since(t0))
	}
	return float64(fastest.Microseconds())
}
