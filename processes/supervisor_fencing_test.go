package processes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/eventstore"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/processes"
)

// candidate is a processes.Candidacy a test steers: it leads while told to
// and while it has not stood down; each StandAgain is a new tenure.
type candidate struct {
	leads, down       atomic.Bool
	tenure            atomic.Uint64
	downs, standAgain atomic.Int64
}

func (c *candidate) IsLeader() bool { return c.leads.Load() && !c.down.Load() }
func (c *candidate) Tenure() uint64 { return c.tenure.Load() }
func (c *candidate) StandDown()     { c.down.Store(true); c.downs.Add(1) }
func (c *candidate) StandAgain() {
	c.tenure.Add(1)
	c.down.Store(false)
	c.standAgain.Add(1)
}

// unreachableStore fails reads and appends while cut off, as a store
// behind a partition does; the subscription already open goes on (it
// would only stall). It counts the reads.
type unreachableStore struct {
	*eventstore.Store
	cutOff, hangAppends atomic.Bool
	reads               atomic.Int64
}

var errCutOff = errors.New("event store unreachable")

func (s *unreachableStore) ReadStream(ctx context.Context, stream string) ([]domain.RecordedEvent, error) {
	s.reads.Add(1)
	if s.cutOff.Load() {
		return nil, errCutOff
	}
	return s.Store.ReadStream(ctx, stream)
}

func (s *unreachableStore) Append(ctx context.Context, stream string, expected domain.ExpectedRevision, events ...domain.NewEvent) (uint64, error) {
	if s.cutOff.Load() {
		return 0, errCutOff
	}
	if s.hangAppends.Load() {
		<-ctx.Done() // as a store client retrying until its caller gives up
		return 0, errors.Wrap(errCutOff, ctx.Err().Error())
	}
	return s.Store.Append(ctx, stream, expected, events...)
}

// scanOnce moves clock one interval on and waits until the supervisor
// read the store at its scan.
func scanOnce(t *testing.T, clock interface{ Advance(time.Duration) }, store *unreachableStore) {
	t.Helper()
	before := store.reads.Load()
	clock.Advance(time.Second)
	require.Eventually(t, func() bool { return store.reads.Load() > before }, 10*time.Second, time.Millisecond, "the scan reads the store")
}

// TestASupervisorThatCannotReachTheStoreGivesUpTheLease: a leader whose
// event store stops answering keeps the lease for StoreTimeout, then stands
// down (its term ends) so that a standby can lead; once the store answers
// it stands again and, given the lease anew, acts in a newer term.
func TestASupervisorThatCannotReachTheStoreGivesUpTheLease(t *testing.T) {
	store := &unreachableStore{Store: embeddedStore(t)}
	clock := newFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	wf := oneStep("work", 2*time.Second, domain.CompensateOnExhausted)
	leader := &candidate{}
	leader.leads.Store(true)
	v := &processes.Supervisor{Store: store, Alerts: &alerts{seen: map[string]int{}}, Workflows: workflows{"work": wf},
		Actor: "supervisor/cut-off", Clock: clock, Logger: quiet(), Interval: time.Second, StoreTimeout: 3 * time.Second,
		Leader: leader, Terms: processes.StoreLeaseTerms{Store: store}}
	run(t, v.Run)
	<-v.Ready()
	scanOnce(t, clock, store)
	require.Eventually(t, func() bool { return v.Stats().LeaseTerm == 1 }, 10*time.Second, time.Millisecond, "the leader acts in term 1")

	store.cutOff.Store(true)
	for range 2 {
		scanOnce(t, clock, store)
		assert.Zero(t, leader.downs.Load(), "the lease is kept while the store has been silent less than StoreTimeout")
	}
	scanOnce(t, clock, store)
	require.Eventually(t, func() bool { return leader.downs.Load() == 1 }, 10*time.Second, time.Millisecond, "it stands down after StoreTimeout")
	assert.Zero(t, v.Stats().LeaseTerm, "its term ended")
	assert.EqualValues(t, 1, v.Stats().StandDowns)
	scanOnce(t, clock, store)
	assert.EqualValues(t, 1, leader.downs.Load(), "it stands down once")

	store.cutOff.Store(false)
	scanOnce(t, clock, store)
	require.Eventually(t, func() bool { return leader.standAgain.Load() == 1 }, 10*time.Second, time.Millisecond, "it stands again once the store answers")
	scanOnce(t, clock, store)
	require.Eventually(t, func() bool { return v.Stats().LeaseTerm == 2 }, 10*time.Second, time.Millisecond, "and leads in a newer term")
}

// TestAnOldLeaderIsFencedOffByANewerTerm: supervisor A leads in term 1 and
// is then paused (its clock stands still). B takes the lease in term 2 and
// times out the task's first attempt; the scheduler dispatches a second.
// When A wakes still believing it leads, its timeout of the second attempt
// is refused (domain.ErrStaleLeaseTerm) and counted; once A is given the
// lease anew it acts in term 3 and its timeout is accepted.
func TestAnOldLeaderIsFencedOffByANewerTerm(t *testing.T) {
	store := embeddedStore(t)
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	wf := oneStep("work", 2*time.Second, domain.CompensateOnExhausted)
	history{t: t, store: store, now: start}.task("fence-1", wf, true)
	terms := processes.StoreLeaseTerms{Store: store}

	newSupervisor := func(actor string) (*processes.Supervisor, *candidate, interface{ Advance(time.Duration) }) {
		clock := newFakeClock(start)
		leader := &candidate{}
		leader.leads.Store(true)
		v := &processes.Supervisor{Store: store, Alerts: &alerts{seen: map[string]int{}}, Workflows: workflows{"work": wf},
			Actor: actor, Clock: clock, Logger: quiet(), Interval: time.Second, Leader: leader, Terms: terms}
		run(t, v.Run)
		<-v.Ready()
		return v, leader, clock
	}
	a, aLease, aClock := newSupervisor("supervisor/a")
	aClock.Advance(time.Second) // not due yet: A only begins its term
	require.Eventually(t, func() bool { return a.Stats().LeaseTerm == 1 }, 10*time.Second, time.Millisecond)

	b, _, bClock := newSupervisor("supervisor/b")
	bClock.Advance(3 * time.Second)
	require.Eventually(t, func() bool { return b.Stats().Timeouts == 1 }, 10*time.Second, time.Millisecond, "B times out attempt 1")
	assert.EqualValues(t, 2, b.Stats().LeaseTerm)

	// The scheduler dispatches the retry; A's subscription brings it.
	recorded, err := store.ReadStream(context.Background(), domain.TaskStream("fence-1"))
	require.NoError(t, err)
	task := domain.NewTask("fence-1")
	for i := range recorded {
		_, err := task.ApplyRecorded(&recorded[i])
		require.NoError(t, err)
	}
	require.EqualValues(t, 2, task.LeaseTerm)
	retry := task.Next(wf, domain.Decision{Now: start.Add(4 * time.Second), Actor: "scheduler/test"})
	require.Len(t, retry, 1)
	require.IsType(t, domain.StepDispatched{}, retry[0])
	data, err := domain.EncodeEvent(retry[0])
	require.NoError(t, err)
	_, err = store.Append(context.Background(), domain.TaskStream("fence-1"), domain.ExpectAfter(task.Revision),
		domain.NewEvent{Type: retry[0].EventType(), Data: data, Metadata: domain.EventMetadata{CorrelationID: "fence-1", Actor: "scheduler/test"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.Held()["deadlines"] >= 2 }, 10*time.Second, time.Millisecond, "A follows the retry")

	aClock.Advance(6 * time.Second) // A wakes: both attempts are due on its clock
	require.Eventually(t, func() bool { return a.Stats().StaleTerms >= 1 }, 10*time.Second, time.Millisecond, "A's timeout in term 1 is refused")
	assert.Zero(t, a.Stats().Timeouts)
	timedOut := func() []int64 {
		recorded, err := store.ReadStream(context.Background(), domain.TaskStream("fence-1"))
		require.NoError(t, err)
		var terms []int64
		for _, r := range recorded {
			if e, err := r.Decode(); err == nil {
				if to, ok := e.(domain.StepTimedOut); ok {
					terms = append(terms, to.LeaseTerm)
				}
			}
		}
		return terms
	}
	assert.Equal(t, []int64{2}, timedOut(), "only B's timeout is recorded")

	aLease.StandDown() // A is given the lease anew: a new tenure, a new term
	aLease.StandAgain()
	aClock.Advance(time.Second)
	require.Eventually(t, func() bool { return a.Stats().Timeouts == 1 }, 10*time.Second, time.Millisecond, "A times out attempt 2 in a newer term")
	assert.EqualValues(t, 3, a.Stats().LeaseTerm)
	assert.Equal(t, []int64{2, 3}, timedOut())
}

// TestAStoreTimeoutShorterThanTheIntervalIsRefused: a supervisor would
// stand down at every scan the store missed.
func TestAStoreTimeoutShorterThanTheIntervalIsRefused(t *testing.T) {
	v := &processes.Supervisor{Interval: 2 * time.Second, StoreTimeout: time.Second}
	err := v.Validate()
	require.ErrorIs(t, err, processes.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "StoreTimeout (1s) must be at least Interval (2s)")
	v.StoreTimeout = -time.Second
	assert.Contains(t, v.Validate().Error(), "StoreTimeout must not be negative")
	v.StoreTimeout = 0 // the default: the interval, when longer than DefaultSupervisorStoreTimeout
	v.Interval = time.Hour
	assert.NotContains(t, fmt.Sprint(v.Validate()), "StoreTimeout")
}

// TestLeaseTermsAreNeverBegunTwice: instances that begin terms at once get
// distinct terms, numbered 1, 2, ... as their LeaseTermBegan events are in
// the stream. Three instances of two terms each can lose at most five
// races, fewer than BeginTerm's tries.
func TestLeaseTermsAreNeverBegunTwice(t *testing.T) {
	store := embeddedStore(t)
	terms := processes.StoreLeaseTerms{Store: store}
	got := make(chan int64, 6)
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2 {
				term, err := terms.BeginTerm(context.Background(), fmt.Sprintf("supervisor/%d", i), at)
				assert.NoError(t, err)
				got <- term
			}
		}()
	}
	wg.Wait()
	close(got)
	var all []int64
	for term := range got {
		all = append(all, term)
	}
	assert.ElementsMatch(t, []int64{1, 2, 3, 4, 5, 6}, all)

	recorded, err := store.ReadStream(context.Background(), processes.LeaseTermsStream)
	require.NoError(t, err)
	require.Len(t, recorded, 6)
	for i, r := range recorded {
		var began processes.LeaseTermBegan
		require.NoError(t, json.Unmarshal(r.Data, &began))
		assert.EqualValues(t, i+1, began.Term)
		assert.Equal(t, r.Metadata.Actor, began.Actor)
		assert.True(t, at.Equal(began.At))
	}
}

// TestAnAppendThatHangsDoesNotHoldTheSupervisor: an append to a store that
// stopped answering (its client retries until the caller gives up) ends
// after StoreTimeout, so the supervisor goes on scanning (and would stand
// down) instead of waiting on it with the lease; the attempt is timed out
// once the store answers again.
func TestAnAppendThatHangsDoesNotHoldTheSupervisor(t *testing.T) {
	store := &unreachableStore{Store: embeddedStore(t)}
	clock := newFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	wf := oneStep("work", 2*time.Second, domain.CompensateOnExhausted)
	history{t: t, store: store.Store, now: clock.Now()}.task("hang-1", wf, true)
	leader := &candidate{}
	leader.leads.Store(true)
	v := &processes.Supervisor{Store: store, Alerts: &alerts{seen: map[string]int{}}, Workflows: workflows{"work": wf},
		Actor: "supervisor/hanging", Clock: clock, Logger: quiet(), Interval: time.Second, StoreTimeout: time.Second,
		Leader: leader, Terms: processes.StoreLeaseTerms{Store: store}}
	run(t, v.Run)
	<-v.Ready()
	clock.Advance(time.Second)
	require.Eventually(t, func() bool { return v.Stats().LeaseTerm == 1 }, 10*time.Second, time.Millisecond)
	store.hangAppends.Store(true)
	scanOnce(t, clock, store) // not due yet
	scanOnce(t, clock, store) // the attempt is due: its append hangs
	scanOnce(t, clock, store) // and yet the supervisor scans again
	assert.Zero(t, count(eventTypes(t, store.Store, "hang-1"), domain.StepTimedOutType))

	store.hangAppends.Store(false)
	clock.Advance(time.Second)
	require.Eventually(t, func() bool { return count(eventTypes(t, store.Store, "hang-1"), domain.StepTimedOutType) == 1 }, 10*time.Second,
		5*time.Millisecond, "the attempt is timed out once the store answers")
}
