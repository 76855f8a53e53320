package httpagent

import (
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/processes/agentruntime"
)

// hostCalls is what a Handler with HealthByTarget knows of a host's calls:
// those in flight, when it last answered, and whether its calls hang.
// Handler.mu guards it.
type hostCalls struct {
	calls map[*hostCall]struct{}
	// lastAnswer is when a call to the host last ended with its answer
	// (not at its deadline).
	lastAnswer time.Time
	// hanging says calls hang: refused until until, then one trial.
	hanging bool
	until   time.Time
	reason  string
	// trial is the trial call in flight, if any.
	trial *hostCall
}

// hostCall is one call in flight.
type hostCall struct{ start time.Time }

// callStarted admits a call to host, or refuses it, naming the host, while
// the host's calls hang: until BreakerOpenFor after they were seen to,
// and then while its one trial call is under way.
func (h *Handler) callStarted(host string) (*hostCall, error) {
	now := h.cfg.Clock()
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.hosts[host]
	if st == nil {
		st = &hostCalls{calls: map[*hostCall]struct{}{}}
		h.hosts[host] = st
	}
	h.checkHangLocked(st, now)
	c := &hostCall{start: now}
	if st.hanging {
		if now.Before(st.until) || st.trial != nil {
			return nil, errors.Wrapf(&agentruntime.CircuitOpenError{Until: st.until, Cause: "host " + host + ": " + st.reason, Target: host}, "host %s", host)
		}
		st.trial = c
	}
	st.calls[c] = struct{}{}
	return c, nil
}

// checkHangLocked notes that the host's calls hang: the oldest call
// started since it last answered has run longer than HangAfter; or that a
// trial hangs too. The caller holds mu.
func (h *Handler) checkHangLocked(st *hostCalls, now time.Time) {
	if st.hanging {
		if st.trial != nil && now.Sub(st.trial.start) > h.cfg.HangAfter {
			st.trial = nil
			st.until = now.Add(h.cfg.BreakerOpenFor)
		}
		return
	}
	var oldest time.Time
	for c := range st.calls {
		if !c.start.Before(st.lastAnswer) && (oldest.IsZero() || c.start.Before(oldest)) {
			oldest = c.start
		}
	}
	if !oldest.IsZero() && now.Sub(oldest) > h.cfg.HangAfter {
		st.hanging, st.until = true, now.Add(h.cfg.BreakerOpenFor)
		st.reason = "calls hang: oldest in flight " + now.Sub(oldest).Round(100*time.Millisecond).String()
	}
}

// callEnded notes the end of a call: answered when the host answered
// before the deadline. An answer that succeeded (or refused for good) ends
// a hang; a trial that failed or was cut off starts another wait.
func (h *Handler) callEnded(host string, c *hostCall, err error, answered bool) {
	now := h.cfg.Clock()
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.hosts[host]
	if st == nil {
		return
	}
	delete(st.calls, c)
	wasTrial := st.trial == c
	if wasTrial {
		st.trial = nil
	}
	if answered {
		st.lastAnswer = now
	}
	if st.hanging {
		switch {
		case answered && (err == nil || errors.Is(err, agentruntime.ErrPermanent)):
			st.hanging = false
		case wasTrial:
			st.until = now.Add(h.cfg.BreakerOpenFor)
		}
	}
	if len(st.calls) == 0 && !st.hanging {
		delete(h.hosts, host) // bounded by the hosts in flight or hanging
	}
}

// callDropped forgets a call admitted but not made (its breaker refused
// it): it neither answered nor hung.
func (h *Handler) callDropped(host string, c *hostCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.hosts[host]
	if st == nil {
		return
	}
	delete(st.calls, c)
	if st.trial == c {
		st.trial = nil
	}
	if len(st.calls) == 0 && !st.hanging {
		delete(h.hosts, host)
	}
}
