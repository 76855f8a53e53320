package main

import (
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain/protocol"
)

// eachAgent parses AGENT=VALUE[,AGENT=VALUE...] and hands each pair to set.
func eachAgent(spec, want string, set func(agent, value string) error) error {
	for _, pair := range strings.Split(spec, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		agent, value, ok := strings.Cut(pair, "=")
		if !ok || agent == "" || value == "" {
			return errors.Newf("%q: want AGENT=%s", pair, want)
		}
		if err := set(agent, value); err != nil {
			return errors.Wrapf(err, "%s", pair)
		}
	}
	return nil
}

// agentCounts collects AGENT=N flags (comma-separated, repeatable).
type agentCounts map[string]int

func (f agentCounts) String() string { return "" }

func (f agentCounts) Set(spec string) error {
	return eachAgent(spec, "N", func(agent, value string) error {
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 {
			return errors.Newf("%q is not a whole number of at least 1", value)
		}
		f[agent] = n
		return nil
	})
}

// agentRates collects AGENT=CALLS/PERIOD flags, e.g. payment=50/1s.
type agentRates map[string]protocol.RateLimit

func (f agentRates) String() string { return "" }

func (f agentRates) Set(spec string) error {
	return eachAgent(spec, "CALLS/PERIOD", func(agent, value string) error {
		calls, period, ok := strings.Cut(value, "/")
		n, err := strconv.Atoi(calls)
		if !ok || err != nil || n < 1 {
			return errors.Newf("%q: want CALLS/PERIOD, e.g. 50/1s", value)
		}
		d, err := time.ParseDuration(period)
		if err != nil || d < time.Millisecond {
			return errors.Newf("%q: the period must be a duration of at least 1ms, e.g. 1s", value)
		}
		f[agent] = protocol.RateLimit{Calls: n, PeriodMillis: d.Milliseconds()}
		return nil
	})
}

// agentDurations collects AGENT=DURATION flags.
type agentDurations map[string]time.Duration

func (f agentDurations) String() string { return "" }

func (f agentDurations) Set(spec string) error {
	return eachAgent(spec, "DURATION", func(agent, value string) error {
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 {
			return errors.Newf("%q is not a positive duration", value)
		}
		f[agent] = d
		return nil
	})
}
