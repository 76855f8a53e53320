// Package invariants checks what every run of saga must keep, on the events
// an event store holds: the end-to-end tests of package integration and the
// cluster suite (integration/cluster) share it. It only reads events; it
// asserts nothing itself, so that each test reports the violations its way.
package invariants

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/sagaengine/saga/domain"
)

// Stream checks the invariants every task stream must keep and returns the
// task its events fold into, with a sentence per violation:
//   - no attempt of a step or of a compensation is dispatched twice (but
//     again after an agent gave it back, StepReturned, as it does not
//     count);
//   - no attempt times out twice;
//   - at most one final event (TaskProcessed, TaskCompensated) and nothing
//     after it;
//   - a compensated task undid its steps in reverse order of completion
//     (for a list of steps, reverse list order);
//   - the lease terms of its timeouts never decrease (no supervisor acted
//     on the task after a newer leader had: the fencing of issue 28).
func Stream(id string, events []domain.RecordedEvent) (*domain.Task, []string) {
	task := domain.NewTask(id)
	var problems []string
	seen := map[string]bool{}
	once := func(kind string, step string, attempt int) {
		key := fmt.Sprintf("%s/%s/%d", kind, step, attempt)
		if seen[key] {
			problems = append(problems, fmt.Sprintf("%s: %s twice", id, key))
		}
		seen[key] = true
	}
	finals := 0
	var undone []int64 // the Ended of each step undone, in order
	var term int64     // the newest lease term of a timeout so far
	for i, r := range events {
		ev, err := domain.DecodeEvent(r.Type, r.Data)
		if err != nil {
			return task, append(problems, fmt.Sprintf("%s: revision %d (%s) does not decode: %v", id, i, r.Type, err))
		}
		if finals > 0 {
			problems = append(problems, fmt.Sprintf("%s: transition after the final state: %s at revision %d", id, r.Type, i))
		}
		switch e := ev.(type) {
		case domain.StepDispatched:
			once("dispatch", e.Step, e.Attempt)
		case domain.CompensationDispatched:
			once("compensation", e.Step, e.Attempt)
		case domain.StepReturned:
			// An attempt an agent gave back without calling its service
			// does not count: it goes again with the same number.
			kind := "dispatch"
			if e.Compensation {
				kind = "compensation"
			}
			delete(seen, fmt.Sprintf("%s/%s/%d", kind, e.Step, e.Attempt))
		case domain.StepTimedOut:
			once(fmt.Sprintf("timeout-%v", e.Compensation), e.Step, e.Attempt)
			if e.LeaseTerm < term {
				problems = append(problems, fmt.Sprintf("%s: a timeout in lease term %d after one in term %d, at revision %d", id, e.LeaseTerm, term, i))
			}
			term = max(term, e.LeaseTerm)
		case domain.StepCompensated:
			if s := task.Step(e.Step); s != nil {
				undone = append(undone, s.Ended)
			}
		case domain.TaskProcessed, domain.TaskCompensated:
			finals++
		}
		task.Apply(ev)
	}
	if task.State == domain.StateCompensated {
		for i := 1; i < len(undone); i++ {
			if undone[i-1] <= undone[i] {
				problems = append(problems, fmt.Sprintf("%s: compensated out of reverse order of completion: %v", id, undone))
				break
			}
		}
	}
	return task, problems
}

// Effects checks what Stream does not, on what the task did to remote
// services: no step succeeded twice, and only steps that may have taken
// effect were compensated: steps that succeeded, or whose attempts were
// sent and not refused for good at the last answer (a timed-out attempt may
// have taken effect; the task compensates it to be safe).
func Effects(id string, events []domain.RecordedEvent) []string {
	var problems []string
	succeeded := map[string]int{}
	sent := map[string]bool{}
	refused := map[string]bool{}
	for i, r := range events {
		ev, err := domain.DecodeEvent(r.Type, r.Data)
		if err != nil {
			continue // Stream reports it
		}
		switch e := ev.(type) {
		case domain.StepDispatched:
			sent[e.Step] = true
		case domain.StepFailed:
			refused[e.Step] = e.Failure == domain.FailurePermanent
		case domain.StepTimedOut:
			if !e.Compensation {
				refused[e.Step] = false
			}
		case domain.StepSucceeded:
			refused[e.Step] = false
			if succeeded[e.Step]++; succeeded[e.Step] == 2 {
				problems = append(problems, fmt.Sprintf("%s: step %s succeeded twice (revision %d)", id, e.Step, i))
			}
		case domain.CompensationDispatched:
			if succeeded[e.Step] == 0 && (!sent[e.Step] || refused[e.Step]) {
				problems = append(problems, fmt.Sprintf("%s: compensation of %s, which cannot have taken effect (revision %d)", id, e.Step, i))
			}
		}
	}
	return problems
}

// Action is an event a supervisor appended: who appended it and when the
// store recorded it.
type Action struct {
	Actor    string
	Recorded time.Time
	Position uint64
	Stream   string
}

// SupervisorActions picks from events the ones a supervisor appended (their
// actor starts with "supervisor/").
func SupervisorActions(events []domain.RecordedEvent) []Action {
	var out []Action
	for _, r := range events {
		if len(r.Metadata.Actor) > len(supervisorPrefix) && r.Metadata.Actor[:len(supervisorPrefix)] == supervisorPrefix {
			out = append(out, Action{Actor: r.Metadata.Actor, Recorded: r.Recorded, Position: r.Position, Stream: r.Stream})
		}
	}
	return out
}

const supervisorPrefix = "supervisor/"

// OverlappingLeaders finds supervisors that acted as leader at the same
// time. Events carry no lease term yet, so it judges by the one clock every
// action shares, the store's: in the order the store recorded them, an
// action by A, then one by B, then one by A again, all within window, means
// A and B both acted in that window. A lease handed over and back cannot do
// that in less than the group's session timeout (a member that dies or is
// cut off keeps the lease until its session expires), so window should be at
// most that (kafka.LeaseSessionTimeout). A handover on a clean leave (A
// stopped with SIGTERM, B took over at once, A started again and took the
// lease back) could, so the suite never stops a supervisor gracefully.
func OverlappingLeaders(actions []Action, window time.Duration) []string {
	sorted := slices.Clone(actions)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Position < sorted[j].Position })
	var problems []string
	reported := map[[2]string]bool{}
	// last[actor] is the index of actor's latest action so far.
	last := map[string]int{}
	for k, a := range sorted {
		if j, ok := last[a.Actor]; ok && k-j > 1 {
			// Someone else acted between j and k: an overlap if it all
			// happened within window.
			if a.Recorded.Sub(sorted[j].Recorded) < window {
				other := sorted[j+1]
				for _, b := range sorted[j+1 : k] {
					if b.Actor != a.Actor {
						other = b
						break
					}
				}
				pair := [2]string{a.Actor, other.Actor}
				if !reported[pair] {
					reported[pair] = true
					problems = append(problems, fmt.Sprintf("%s acted at %s (%s) and %s, and %s acted at %s (%s) in between: two leaders",
						a.Actor, sorted[j].Recorded.Format("15:04:05.000"), sorted[j].Stream, a.Recorded.Format("15:04:05.000"),
						other.Actor, other.Recorded.Format("15:04:05.000"), other.Stream))
				}
			}
		}
		last[a.Actor] = k
	}
	return problems
}
