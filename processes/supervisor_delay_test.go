package processes_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// coolOff waits 9.5 s, then runs work.
func coolOff() *domain.Workflow {
	return (&domain.Workflow{Name: "cool-off", Version: 1, Steps: []domain.StepDefinition{
		{Name: "wait", Delay: &domain.DelayDefinition{For: 9500 * time.Millisecond}},
		{Name: "work", Agent: "worker"}}}).WithDefaults()
}

// delaysElapsed returns the StepDelayElapsed events of a task's stream.
func delaysElapsed(t *testing.T, store processes.EventStore, id string) []domain.StepDelayElapsed {
	t.Helper()
	recorded, err := store.ReadStream(context.Background(), domain.TaskStream(id))
	require.NoError(t, err)
	var out []domain.StepDelayElapsed
	for _, r := range recorded {
		if e, err := r.Decode(); err == nil {
			if fired, ok := e.(domain.StepDelayElapsed); ok {
				out = append(out, fired)
			}
		}
	}
	return out
}

// TestTheSupervisorFiresADelayAtItsTimeNotBefore: the supervisor scans
// every second of its clock; a delay until 9.5 s is fired by the scan at
// 10 s, none before, in the supervisor's lease term.
func TestTheSupervisorFiresADelayAtItsTimeNotBefore(t *testing.T) {
	store := &unreachableStore{Store: embeddedStore(t)}
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := newFakeClock(start)
	wf := coolOff()
	history{t: t, store: store.Store, now: start}.task("delay-1", wf, true)
	require.Equal(t, []string{domain.TaskSubmittedType, domain.StepDelayedType}, eventTypes(t, store, "delay-1"))
	leader := &candidate{}
	leader.leads.Store(true)
	v := &processes.Supervisor{Store: store, Alerts: &alerts{seen: map[string]int{}}, Workflows: workflows{wf.Name: wf},
		Actor: "supervisor/timer", Clock: clock, Logger: quiet(), Interval: time.Second, Leader: leader,
		Terms: processes.StoreLeaseTerms{Store: store}}
	run(t, v.Run)
	<-v.Ready()
	require.Eventually(t, func() bool { return v.Held()["timers"] == 1 }, 10*time.Second, time.Millisecond, "the timer is indexed")
	for range 9 {
		scanOnce(t, clock, store)
	}
	scanOnce(t, clock, store) // the scan at 10 s; the one at 9 s is over
	require.Eventually(t, func() bool { return len(delaysElapsed(t, store, "delay-1")) == 1 }, 10*time.Second, time.Millisecond)
	fired := delaysElapsed(t, store, "delay-1")[0]
	until := start.Add(9500 * time.Millisecond)
	assert.True(t, fired.Until.Equal(until))
	assert.True(t, fired.At.Equal(start.Add(10*time.Second)), "fired by the first scan at or after its time, not before: %s", fired.At)
	assert.EqualValues(t, 1, fired.LeaseTerm)
	assert.Equal(t, "supervisor/timer", fired.FiredBy)
	assert.EqualValues(t, 1, v.Stats().DelaysElapsed)
	require.Eventually(t, func() bool { return v.Held()["timers"] == 0 }, 10*time.Second, time.Millisecond)

	scanOnce(t, clock, store)
	scanOnce(t, clock, store)
	assert.Len(t, delaysElapsed(t, store, "delay-1"), 1, "a delay fires once")
}

// TestARestartedSupervisorRecoversItsTimers: a supervisor that saved its
// checkpoint with a delay waiting stops; the next one, resuming from the
// checkpoint, reads the task and fires the delay once its time has come.
func TestARestartedSupervisorRecoversItsTimers(t *testing.T) {
	raw := embeddedStore(t)
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	wf := coolOff()
	history{t: t, store: raw, now: start}.task("delay-2", wf, true)

	first, stop := context.WithCancel(context.Background())
	v1 := &processes.Supervisor{Store: raw, Alerts: &alerts{seen: map[string]int{}}, Workflows: workflows{wf.Name: wf}, Actor: "supervisor/first",
		Clock: newFakeClock(start), Logger: quiet(), Leader: leading(false), Checkpoints: raw}
	done := make(chan struct{})
	go func() { defer close(done); _ = v1.Run(first) }()
	require.Eventually(t, func() bool { return v1.Stats().Checkpoints > 0 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 1, v1.Held()["timers"])
	stop()
	<-done

	clock := newFakeClock(start.Add(20 * time.Second))
	v2 := &processes.Supervisor{Store: raw, Alerts: &alerts{seen: map[string]int{}}, Workflows: workflows{wf.Name: wf}, Actor: "supervisor/second",
		Clock: clock, Logger: quiet(), Interval: time.Second, Checkpoints: raw}
	run(t, v2.Run)
	<-v2.Ready()
	assert.EqualValues(t, 1, v2.Stats().StartLoads, "the task came from the checkpoint")
	assert.Equal(t, 1, v2.Held()["timers"], "its timer with it")
	clock.Advance(time.Second)
	require.Eventually(t, func() bool { return len(delaysElapsed(t, raw, "delay-2")) == 1 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, "supervisor/second", delaysElapsed(t, raw, "delay-2")[0].FiredBy)
}

// TestTwoSupervisorsFireADelayOnce: two supervisors that both believe
// they lead fire the same due delay at once; the task records it once.
func TestTwoSupervisorsFireADelayOnce(t *testing.T) {
	store := embeddedStore(t)
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	wf := coolOff()
	const tasks = 20
	h := history{t: t, store: store, now: start}
	for i := range tasks {
		h.task("twice-"+string(rune('a'+i)), wf, true)
	}
	terms := processes.StoreLeaseTerms{Store: store}
	var sups []*processes.Supervisor
	var clocks []interface{ Advance(time.Duration) }
	for _, actor := range []string{"supervisor/a", "supervisor/b"} {
		clock := newFakeClock(start)
		v := &processes.Supervisor{Store: store, Alerts: &alerts{seen: map[string]int{}}, Workflows: workflows{wf.Name: wf}, Actor: actor,
			Clock: clock, Logger: quiet(), Interval: time.Second, Terms: terms}
		run(t, v.Run)
		<-v.Ready()
		sups, clocks = append(sups, v), append(clocks, clock)
	}
	for _, c := range clocks {
		go c.Advance(10 * time.Second)
	}
	require.Eventually(t, func() bool { return sups[0].Stats().DelaysElapsed+sups[1].Stats().DelaysElapsed >= tasks }, 20*time.Second,
		5*time.Millisecond, "every delay is fired by one of them")
	require.Eventually(t, func() bool { return sups[0].Held()["timers"] == 0 && sups[1].Held()["timers"] == 0 }, 20*time.Second,
		5*time.Millisecond, "both looked at every timer")
	for i := range tasks {
		assert.Len(t, delaysElapsed(t, store, "twice-"+string(rune('a'+i))), 1, "the task records its delay once")
	}
	assert.LessOrEqual(t, sups[0].Stats().DelaysElapsed+sups[1].Stats().DelaysElapsed, int64(tasks), "no supervisor counts a fire the task refused")
}
