// Package audittest holds a recorded task history for the tests of the
// audit's read model (projections) and of its presentation (sagactl), so
// both check the same events. It is imported only by tests.
package audittest

import (
	"encoding/json"
	"time"

	"github.com/sagaengine/saga/domain"
)

// T0 is when the history starts.
var T0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// History is a compensated order, task o-1 from T0: shipping hung three times, then every
// step was undone in reverse order.
func History() []domain.RecordedEvent {
	type at struct {
		offset time.Duration
		actor  string
		event  domain.Event
	}
	dispatch := func(step, agent string, attempt int, off time.Duration) domain.StepDispatched {
		return domain.StepDispatched{TaskID: "o-1", Step: step, Agent: agent, Attempt: attempt, CompleteBy: T0.Add(off + 5*time.Second),
			LockedBy: "scheduler/a", IdempotencyKey: "o-1/" + step, DispatchedAt: T0.Add(off)}
	}
	timeout := func(attempt int, off time.Duration) domain.StepTimedOut {
		return domain.StepTimedOut{TaskID: "o-1", Step: "schedule-shipping", Attempt: attempt, FailureCount: attempt,
			CompleteBy: T0.Add(off), DetectedBy: "supervisor/b", At: T0.Add(off)}
	}
	compensate := func(step, agent, action string, off time.Duration) domain.CompensationDispatched {
		return domain.CompensationDispatched{TaskID: "o-1", Step: step, Agent: agent, Action: action, Attempt: 1,
			CompleteBy: T0.Add(off + 5*time.Second), LockedBy: "scheduler/a", IdempotencyKey: "o-1/" + step + "/compensation", DispatchedAt: T0.Add(off)}
	}
	steps := []string{"reserve-inventory", "charge-payment", "schedule-shipping"}
	sched, sup := "scheduler/a", "supervisor/b"
	list := []at{
		{0, "submitter/a", domain.TaskSubmitted{TaskID: "o-1", Workflow: "order", Steps: steps, ReplyTo: "shop.replies", Order: json.RawMessage(`{}`), SubmittedAt: T0}},
		{10 * time.Millisecond, sched, dispatch("reserve-inventory", "inventory", 1, 10*time.Millisecond)},
		{30 * time.Millisecond, sched, domain.StepSucceeded{TaskID: "o-1", Step: "reserve-inventory", Attempt: 1, At: T0.Add(30 * time.Millisecond)}},
		{30 * time.Millisecond, sched, dispatch("charge-payment", "payment", 1, 30*time.Millisecond)},
		{50 * time.Millisecond, sched, domain.StepSucceeded{TaskID: "o-1", Step: "charge-payment", Attempt: 1, At: T0.Add(50 * time.Millisecond)}},
		{50 * time.Millisecond, sched, dispatch("schedule-shipping", "shipping", 1, 50*time.Millisecond)},
		{5100 * time.Millisecond, sup, timeout(1, 5050*time.Millisecond)},
		{5100 * time.Millisecond, sup, domain.StepRetryScheduled{TaskID: "o-1", Step: "schedule-shipping", Attempt: 2, NotBefore: T0.Add(5300 * time.Millisecond), At: T0.Add(5100 * time.Millisecond)}},
		{5300 * time.Millisecond, sched, dispatch("schedule-shipping", "shipping", 2, 5300*time.Millisecond)},
		{10400 * time.Millisecond, sup, timeout(2, 10300*time.Millisecond)},
		{10400 * time.Millisecond, sup, domain.StepRetryScheduled{TaskID: "o-1", Step: "schedule-shipping", Attempt: 3, NotBefore: T0.Add(10800 * time.Millisecond), At: T0.Add(10400 * time.Millisecond)}},
		{10800 * time.Millisecond, sched, dispatch("schedule-shipping", "shipping", 3, 10800*time.Millisecond)},
		{15900 * time.Millisecond, sup, timeout(3, 15800*time.Millisecond)},
		{15900 * time.Millisecond, sup, domain.CompensationRequested{TaskID: "o-1", Step: "schedule-shipping", Reason: "step schedule-shipping failed after 3 of 3 attempts: no reply", RequestedBy: sup, At: T0.Add(15900 * time.Millisecond)}},
		{15910 * time.Millisecond, sched, compensate("schedule-shipping", "shipping", "cancel-shipping", 15910*time.Millisecond)},
		{15930 * time.Millisecond, sched, domain.StepCompensated{TaskID: "o-1", Step: "schedule-shipping", Attempt: 1, At: T0.Add(15930 * time.Millisecond)}},
		{15930 * time.Millisecond, sched, compensate("charge-payment", "payment", "refund-payment", 15930*time.Millisecond)},
		{15950 * time.Millisecond, sched, domain.StepCompensated{TaskID: "o-1", Step: "charge-payment", Attempt: 1, At: T0.Add(15950 * time.Millisecond)}},
		{15950 * time.Millisecond, sched, compensate("reserve-inventory", "inventory", "release-inventory", 15950*time.Millisecond)},
		{15970 * time.Millisecond, sched, domain.StepCompensated{TaskID: "o-1", Step: "reserve-inventory", Attempt: 1, At: T0.Add(15970 * time.Millisecond)}},
		{15970 * time.Millisecond, sched, domain.TaskCompensated{TaskID: "o-1", At: T0.Add(15970 * time.Millisecond)}},
	}
	out := make([]domain.RecordedEvent, len(list))
	for i, e := range list {
		data, _ := domain.EncodeEvent(e.event)
		out[i] = domain.RecordedEvent{Stream: "task-o-1", Type: e.event.EventType(), Data: data, Revision: uint64(i),
			Position: uint64(1000 + i), Recorded: T0.Add(e.offset), Metadata: domain.EventMetadata{CorrelationID: "o-1", Actor: e.actor}}
	}
	return out
}
