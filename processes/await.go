package processes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"regexp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// Await steps (domain.AwaitDefinition) meet the application's events in an
// inbox: one stream in the event store per topic and correlation value,
// AwaitInboxStream. An event of a type an await wants is put there when it
// arrives (the Awaiter, a consumer of the await topics), and so is a mark
// when a task begins to wait (the scheduler, after it stored
// StepAwaiting). Whoever puts second reads what the first put and
// correlates: the event finds the task waiting, or the task the event that
// came early. The inbox is the index from value to waiting task; no task
// is ever scanned for. Both may correlate the same pair; the expected
// revision of the task's stream lets only one complete the step, and the
// other finds nothing waiting (domain.ErrNotAwaiting).

// Defaults of the await inbox.
const (
	// DefaultAwaitInboxMax is how many entries (events and marks of
	// waiting tasks) an inbox keeps: older ones are dropped.
	DefaultAwaitInboxMax = 64
	// DefaultAwaitInboxRetention is how long an entry is kept: an event
	// that arrived longer ago than this is never correlated.
	DefaultAwaitInboxRetention = 7 * 24 * time.Hour
	// AwaitInboxEventType is the wire name of an inbox entry.
	AwaitInboxEventType = "AwaitInboxEntry"
)

// awaitInboxPrefix starts the name of every inbox stream.
const awaitInboxPrefix = "saga-await-"

var plainValue = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}$`)

// AwaitInboxStream names the inbox stream of topic and value: the value
// itself when it is short and plain, else its SHA-256.
func AwaitInboxStream(topic, value string) string {
	if !plainValue.MatchString(value) {
		sum := sha256.Sum256([]byte(value))
		value = "sha256-" + hex.EncodeToString(sum[:])
	}
	return awaitInboxPrefix + topic + "-" + value
}

// AwaitInboxEntry is one entry of an await inbox: an event that arrived
// (Type and Body set) or a task that waits (TaskID and Step set).
type AwaitInboxEntry struct {
	TaskID string `json:"taskId,omitempty"`
	Step   string `json:"step,omitempty"`
	// Type and Body are the event's; Source says where it was read.
	Type   string          `json:"type,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
	Source string          `json:"source,omitempty"`
	At     time.Time       `json:"at"`
}

// StreamLimiter bounds a stream: the store keeps at most maxCount of its
// events, none older than maxAge. The event store adapter implements it.
type StreamLimiter interface {
	LimitStream(ctx context.Context, stream string, maxCount int, maxAge time.Duration) error
}

// AwaitInbox keeps the entries of await inboxes in the event store.
type AwaitInbox struct {
	Store EventStore
	// Limits, when set, bounds each inbox stream in the store as Max and
	// Retention say; entries past them are never read in any case.
	Limits StreamLimiter
	// Max and Retention bound an inbox; defaults DefaultAwaitInboxMax and
	// DefaultAwaitInboxRetention.
	Max       int
	Retention time.Duration
	Clock     Clock
}

func (in *AwaitInbox) bounds() (int, time.Duration) {
	n, age := in.Max, in.Retention
	if n <= 0 {
		n = DefaultAwaitInboxMax
	}
	if age <= 0 {
		age = DefaultAwaitInboxRetention
	}
	return n, age
}

// Put adds an entry to the inbox of topic and value and returns the
// entries it then holds, oldest first, the new one last.
func (in *AwaitInbox) Put(ctx context.Context, topic, value string, entry AwaitInboxEntry) ([]AwaitInboxEntry, error) {
	stream := AwaitInboxStream(topic, value)
	data, err := json.Marshal(entry)
	if err != nil {
		return nil, errors.Wrap(err, "encode await inbox entry")
	}
	rev, err := in.Store.Append(ctx, stream, domain.ExpectAny(), domain.NewEvent{Type: AwaitInboxEventType, Data: data,
		Metadata: domain.EventMetadata{CausationID: entry.Source, Actor: "await"}})
	if err != nil {
		return nil, errors.Wrapf(err, "put into await inbox %s", stream)
	}
	max, retention := in.bounds()
	if in.Limits != nil && rev%uint64(max) == 0 {
		// Set when the stream is made, and again now and then in case a
		// crash came between the two.
		if err := in.Limits.LimitStream(ctx, stream, max, retention); err != nil {
			return nil, errors.Wrapf(err, "limit await inbox %s", stream)
		}
	}
	return in.Read(ctx, topic, value)
}

// Read returns the entries the inbox of topic and value holds, oldest
// first, within its bounds.
func (in *AwaitInbox) Read(ctx context.Context, topic, value string) ([]AwaitInboxEntry, error) {
	stream := AwaitInboxStream(topic, value)
	max, retention := in.bounds()
	recorded, err := in.Store.ReadStream(ctx, stream)
	if err != nil {
		return nil, errors.Wrapf(err, "read await inbox %s", stream)
	}
	if len(recorded) > max {
		recorded = recorded[len(recorded)-max:]
	}
	oldest := in.Clock.Now().Add(-retention)
	out := make([]AwaitInboxEntry, 0, len(recorded))
	for _, r := range recorded {
		var e AwaitInboxEntry
		if r.Type != AwaitInboxEventType || json.Unmarshal(r.Data, &e) != nil || e.At.Before(oldest) {
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// Correlator completes await steps: it decides what an application event
// does to a task (Scheduler.Correlate). It reports whether a step took
// the event.
type Correlator interface {
	Correlate(ctx context.Context, taskID string, e domain.AwaitedEvent, source string) (bool, error)
}

// AwaitWorkflows lists every version of the registered workflows
// (Registry.AllVersions): a task of an older version waits for what its
// version's await says, on its topic.
type AwaitWorkflows interface {
	AllVersions(ctx context.Context) ([]*domain.Workflow, error)
}

// Awaiter consumes the topics await steps read: it puts each event of a
// type an await wants into its inbox, and completes the steps already
// waiting for it.
type Awaiter struct {
	Workflows  AwaitWorkflows
	Inbox      *AwaitInbox
	Correlator Correlator
	Clock      Clock
	Logger     *slog.Logger
	// MaxEventSize bounds an event's body; default DefaultMaxOrderSize.
	MaxEventSize int

	kept, completed, ignored atomic.Int64
}

// AwaiterStats counts what the awaiter did: events kept in inboxes, steps
// they completed, and events no await wants.
type AwaiterStats struct{ Kept, Completed, Ignored int64 }

// Stats returns the awaiter's counters.
func (a *Awaiter) Stats() AwaiterStats {
	return AwaiterStats{a.kept.Load(), a.completed.Load(), a.ignored.Load()}
}

// Topics lists the topics the registered workflows' await steps read, in
// any of their versions, sorted: the consumer reads them from the moment
// a workflow is registered.
func (a *Awaiter) Topics(ctx context.Context) ([]string, error) {
	all, err := a.Workflows.AllVersions(ctx)
	if err != nil {
		return nil, err
	}
	var topics []string
	for _, w := range all {
		for _, t := range w.AwaitTopics() {
			if !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
	}
	slices.Sort(topics)
	return topics, nil
}

// HandleEvent handles one event of an await topic. It returns an error
// only when the event could not be kept, so that the consumer retries it.
// An event no await wants (another type, no correlation value, not JSON)
// is passed over: the topic is the application's, and carries other
// events too. The await steps of every version are asked, so that a task
// of an older version is still found; the body is read once for each way
// of reading it (type field and correlation pointer).
func (a *Awaiter) HandleEvent(ctx context.Context, msg Inbound) error {
	all, err := a.Workflows.AllVersions(ctx)
	if err != nil {
		return err
	}
	max := a.MaxEventSize
	if max <= 0 {
		max = DefaultMaxOrderSize
	}
	ceType := msg.Headers.Get(protocol.HeaderType)
	type reading struct{ typeField, correlate string }
	type read struct {
		typ, value string
		ok         bool
	}
	var reads map[reading]read
	var events []domain.AwaitedEvent
	for _, w := range all {
		for _, s := range w.Steps {
			aw := s.Await
			if aw == nil || aw.Topic != msg.Topic {
				continue
			}
			how := reading{aw.TypeField, aw.Correlate}
			r, done := reads[how]
			if !done {
				r.typ, r.value, r.ok = aw.Read(msg.Value, ceType, max)
				if reads == nil {
					reads = map[reading]read{}
				}
				reads[how] = r
			}
			typ, value := r.typ, r.value
			if !r.ok || !aw.Wants(typ) {
				continue
			}
			e := domain.AwaitedEvent{Topic: msg.Topic, Type: typ, Value: value, Body: json.RawMessage(msg.Value)}
			if !slices.ContainsFunc(events, func(o domain.AwaitedEvent) bool { return o.Type == typ && o.Value == value }) {
				events = append(events, e)
			}
		}
	}
	if len(events) == 0 {
		a.ignored.Add(1)
		return nil
	}
	for _, e := range events {
		entries, err := a.Inbox.Put(ctx, e.Topic, e.Value, AwaitInboxEntry{Type: e.Type, Body: e.Body, Source: msg.Source(), At: a.Clock.Now()})
		if err != nil {
			return err
		}
		a.kept.Add(1)
		// The tasks waiting, newest mark first, each once.
		var tried []string
		for i := len(entries) - 1; i >= 0; i-- {
			w := entries[i]
			if w.TaskID == "" || slices.Contains(tried, w.TaskID) {
				continue
			}
			tried = append(tried, w.TaskID)
			ok, err := a.Correlator.Correlate(ctx, w.TaskID, e, msg.Source())
			if err != nil {
				return err
			}
			if ok {
				a.completed.Add(1)
			}
		}
	}
	return nil
}

// awaitJob is an application event to correlate to a task; done gets
// whether a step took it.
type awaitJob struct {
	taskID string
	event  domain.AwaitedEvent
	source string
	done   chan<- awaitOutcome
}

type awaitOutcome struct {
	took bool
	err  error
}

func (j awaitJob) do(ctx context.Context, sh *shard) {
	took, err := sh.correlate(ctx, j.taskID, j.event, j.source)
	j.done <- awaitOutcome{took, err}
}

// Correlate decides, on the task's shard, what an application event does
// to the task (domain.Task.Correlate) and carries out what follows, as a
// reply's outcome is. It reports whether a step took the event; an event
// no step of the task waits for (any longer) is no error.
func (s *Scheduler) Correlate(ctx context.Context, taskID string, e domain.AwaitedEvent, source string) (bool, error) {
	s.setup()
	done := make(chan awaitOutcome, 1)
	if err := s.enqueue(ctx, s.shardOf(taskID), awaitJob{taskID: taskID, event: e, source: source, done: done}); err != nil {
		return false, err
	}
	select {
	case o := <-done:
		return o.took, o.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (sh *shard) correlate(ctx context.Context, id string, e domain.AwaitedEvent, source string) (bool, error) {
	var rc roomCheck
	defer sh.decided(id, &rc, true)
	err := sh.update(ctx, id, sh.tasks[id], source, func(t *domain.Task) ([]domain.Event, error) {
		wf, err := sh.s.Workflows.Workflow(ctx, t.Workflow, t.WorkflowVersion)
		if err != nil {
			return nil, errors.Wrapf(err, "task %s", t.ID)
		}
		return sh.decide(t, &rc, func(d domain.Decision) ([]domain.Event, error) { return t.Correlate(wf, e, d) })
	})
	if errors.Is(err, domain.ErrNotAwaiting) || errors.Is(err, domain.ErrTaskNotFound) {
		return false, nil
	}
	return err == nil, err
}

// A mark is put once per wait, not at every resume: each shard remembers
// the marks of its waiting steps that it knows are in their inboxes
// (awaitMark), those its instance put and those it read there, and a
// resume (a start, a rebalance) puts only the marks it does not know of.
// It reads the inbox of those first: a mark already there costs no
// append, only the correlation of the events beside it, in case the
// instance that put it stopped before it correlated them. A mark is put
// anew when it is missing (a crash came between StepAwaiting and its
// mark, or the inbox's bound dropped it before this instance knew of it)
// or is older than half the inbox's retention, so that a wait longer than
// the retention keeps a mark as long as resumes come within it.

// awaitMark is a mark of a waiting step known to be in its inbox since at
// (or being put there).
type awaitMark struct {
	step    string
	attempt int
	at      time.Time
}

// awaitMarkJob notes on the shard that the mark of a waiting step is in
// its inbox (put or read there), or, with gone, that putting it failed.
type awaitMarkJob struct {
	taskID, step string
	attempt      int
	at           time.Time
	gone         bool
}

func (j awaitMarkJob) do(_ context.Context, sh *shard) {
	if j.gone {
		sh.forgetMark(j.taskID, j.step, j.attempt)
		return
	}
	if t := sh.tasks[j.taskID]; t != nil && awaitsAt(t, j.step, j.attempt) {
		sh.noteMark(j.taskID, awaitMark{step: j.step, attempt: j.attempt, at: j.at})
	}
}

// awaitsAt reports whether the task's step waits for an event in attempt.
func awaitsAt(t *domain.Task, step string, attempt int) bool {
	s := t.Step(step)
	return s != nil && s.State == domain.StepStateAwaiting && s.Awaiting != nil && s.Attempt == attempt
}

// noteMark remembers a mark known to be in its inbox, in place of an
// older one of the same step.
func (sh *shard) noteMark(taskID string, m awaitMark) {
	marks := slices.DeleteFunc(sh.marks[taskID], func(o awaitMark) bool { return o.step == m.step })
	sh.marks[taskID] = append(marks, m)
}

// forgetMark forgets the mark of a step in attempt, whose put failed.
func (sh *shard) forgetMark(taskID, step string, attempt int) {
	marks, ok := sh.marks[taskID]
	if !ok {
		return
	}
	marks = slices.DeleteFunc(marks, func(o awaitMark) bool { return o.step == step && o.attempt == attempt })
	if len(marks) == 0 {
		delete(sh.marks, taskID)
		return
	}
	sh.marks[taskID] = marks
}

// keepMarks forgets the marks of the task's steps that no longer wait (the
// task moved on, or finished): the shard's marks follow the steps waiting,
// not the tasks that ever waited.
func (sh *shard) keepMarks(t *domain.Task) {
	marks, ok := sh.marks[t.ID]
	if !ok {
		return
	}
	marks = slices.DeleteFunc(marks, func(m awaitMark) bool { return t.State.Terminal() || !awaitsAt(t, m.step, m.attempt) })
	if len(marks) == 0 {
		delete(sh.marks, t.ID)
		return
	}
	sh.marks[t.ID] = marks
}

// markKnown reports whether the shard knows the mark of the task's step in
// attempt to be in its inbox, put after fresh.
func (sh *shard) markKnown(taskID, step string, attempt int, fresh time.Time) bool {
	return slices.ContainsFunc(sh.marks[taskID], func(m awaitMark) bool {
		return m.step == step && m.attempt == attempt && m.at.After(fresh)
	})
}

// markFresh is the time after which a mark is fresh: put less than half
// the inbox's retention ago.
func (s *Scheduler) markFresh() time.Time {
	_, retention := s.AwaitInbox.bounds()
	return s.Clock.Now().Add(-retention / 2)
}

// awaitStarted puts the mark of a task that began to wait into its inbox,
// and correlates the events that came before it (correlateEarly). It runs
// off the shard's goroutine, which noted the mark before (noteMark); a
// failure to put it is logged and noted, so that the next resume puts it
// again, and the step times out at its deadline if nothing else completes
// it.
func (s *Scheduler) awaitStarted(ctx context.Context, taskID string, e domain.StepAwaiting) {
	if s.AwaitInbox == nil || ctx == nil {
		return
	}
	entries, err := s.AwaitInbox.Put(ctx, e.Topic, e.Value, AwaitInboxEntry{TaskID: taskID, Step: e.Step, At: s.Clock.Now()})
	if err != nil {
		if ctx.Err() == nil {
			s.Logger.Error("await: cannot record a waiting task in its inbox", "task_id", taskID, "step", e.Step, "err", err.Error())
		}
		_ = s.enqueue(ctx, s.shardOf(taskID), awaitMarkJob{taskID: taskID, step: e.Step, attempt: e.Attempt, gone: true})
		return
	}
	s.correlateEarly(ctx, taskID, e, entries)
}

// awaitResumed makes sure, at a resume, that the mark of a waiting step is
// in its inbox: it reads the inbox, and puts the mark (awaitStarted) only
// when no fresh one of the task's step is there. Either way it correlates
// the events the inbox holds.
func (s *Scheduler) awaitResumed(ctx context.Context, taskID string, e domain.StepAwaiting) {
	entries, err := s.AwaitInbox.Read(ctx, e.Topic, e.Value)
	if err != nil {
		if ctx.Err() == nil {
			s.Logger.Error("await: cannot read the inbox of a waiting task", "task_id", taskID, "step", e.Step, "err", err.Error())
		}
		return
	}
	fresh := s.markFresh()
	i := -1 // the newest mark of the task's step
	for j := len(entries) - 1; j >= 0 && i < 0; j-- {
		if entries[j].TaskID == taskID && entries[j].Step == e.Step {
			i = j
		}
	}
	if i < 0 || !entries[i].At.After(fresh) {
		if s.enqueue(ctx, s.shardOf(taskID), awaitMarkJob{taskID: taskID, step: e.Step, attempt: e.Attempt, at: s.Clock.Now()}) == nil {
			s.awaitStarted(ctx, taskID, e)
		}
		return
	}
	if s.enqueue(ctx, s.shardOf(taskID), awaitMarkJob{taskID: taskID, step: e.Step, attempt: e.Attempt, at: entries[i].At}) == nil {
		s.correlateEarly(ctx, taskID, e, entries)
	}
}

// correlateEarly correlates the events among a waiting task's inbox
// entries, oldest first, until one takes the step.
func (s *Scheduler) correlateEarly(ctx context.Context, taskID string, e domain.StepAwaiting, entries []AwaitInboxEntry) {
	for _, entry := range entries {
		if entry.Type == "" {
			continue
		}
		took, err := s.Correlate(ctx, taskID, domain.AwaitedEvent{Topic: e.Topic, Type: entry.Type, Value: e.Value, Body: entry.Body}, entry.Source)
		if err != nil {
			if ctx.Err() == nil {
				s.Logger.Error("await: cannot correlate an event that came early", "task_id", taskID, "step", e.Step, "err", err.Error())
			}
			return
		}
		if took {
			return
		}
	}
}

// startAwait notes the mark of a step that began to wait and puts it off
// the shard's goroutine (awaitStarted).
func (sh *shard) startAwait(t *domain.Task, e domain.StepAwaiting) {
	if sh.s.AwaitInbox == nil {
		return
	}
	sh.noteMark(t.ID, awaitMark{step: e.Step, attempt: e.Attempt, at: sh.s.Clock.Now()})
	go sh.s.awaitStarted(sh.s.runCtx, t.ID, e)
}

// resumeAwaits makes sure the marks of the task's waiting steps are in
// their inboxes (awaitResumed), but for those the shard knows are.
func (sh *shard) resumeAwaits(t *domain.Task) {
	if sh.s.AwaitInbox == nil {
		return
	}
	fresh := sh.s.markFresh()
	for _, s := range t.Steps {
		if s.Awaiting == nil || s.State != domain.StepStateAwaiting || sh.markKnown(t.ID, s.Name, s.Attempt, fresh) {
			continue
		}
		go sh.s.awaitResumed(sh.s.runCtx, t.ID, domain.StepAwaiting{TaskID: t.ID, Step: s.Name, Attempt: s.Attempt,
			Topic: s.Awaiting.Topic, Value: s.Awaiting.Value, Until: s.Awaiting.Until})
	}
}
