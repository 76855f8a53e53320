package domain_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/projections/audittest"
)

// graphWorkflow is a diamond: account, then storage and email side by
// side, then ship after both; newsletter, on its own, only when the order
// asks for it.
func graphWorkflow(t *testing.T) *domain.Workflow {
	t.Helper()
	w, err := domain.ParseDefinition([]byte(`{"name":"signup","defaults":{"budget":"5s","attempts":1},"steps":[
		{"name":"account","agent":"accounts","compensation":"delete-account"},
		{"name":"storage","agent":"storage","after":["account"],"compensation":"free-storage"},
		{"name":"email","agent":"mail","after":["account"],"compensation":"unsend"},
		{"name":"ship","agent":"shipping","after":["storage","email"],"compensation":"cancel"},
		{"name":"newsletter","agent":"mail","after":[],"when":"order.marketing == true","compensation":"unsubscribe"}]}`))
	require.NoError(t, err)
	return w
}

// graphTask drives a task of w through replies, folding what each decides.
type graphTask struct {
	t      *testing.T
	wf     *domain.Workflow
	events []domain.Event
}

func newGraphTask(t *testing.T, wf *domain.Workflow, order string) *graphTask {
	g := &graphTask{t: t, wf: wf}
	g.events = []domain.Event{domain.TaskSubmitted{TaskID: "o-1", Workflow: wf.Name, Steps: wf.StepNames(), Order: json.RawMessage(order), SubmittedAt: t0}}
	g.events = append(g.events, g.task().Next(wf, d)...)
	return g
}

func (g *graphTask) task() *domain.Task { return domain.Fold("o-1", g.events) }

// reply answers the attempt in flight of step (or of its compensation)
// and returns what was decided.
func (g *graphTask) reply(step string, compensation bool, kind domain.FailureKind, result string) []domain.Event {
	g.t.Helper()
	task := g.task()
	leg := &task.Step(step).Leg
	if compensation {
		leg = task.Step(step).Compensation
	}
	require.NotNil(g.t, leg, step)
	r := domain.Reply{Step: step, Compensation: compensation, Attempt: leg.Attempt, Succeeded: kind == "", Failure: kind, Reason: "boom"}
	if result != "" {
		r.Result = json.RawMessage(result)
	}
	events, err := task.RecordReply(g.wf, r, d)
	require.NoError(g.t, err, step)
	g.events = append(g.events, events...)
	return events
}

// names lists the events as TYPE:STEP.
func names(events []domain.Event) []string {
	var out []string
	for _, e := range events {
		name := e.EventType()
		switch e := e.(type) {
		case domain.StepDispatched:
			name += ":" + e.Step
		case domain.StepSkipped:
			name += ":" + e.Step
		case domain.CompensationDispatched:
			name += ":" + e.Step
		case domain.StepSucceeded:
			name += ":" + e.Step
		case domain.StepFailed:
			name += ":" + e.Step
		case domain.StepCompensated:
			name += ":" + e.Step
		}
		out = append(out, name)
	}
	return out
}

func TestGraphValidation(t *testing.T) {
	cases := []struct{ name, steps, problem string }{
		{"unknown step", `{"name":"a","agent":"x"},{"name":"b","agent":"x","after":["nope"]}`, `steps[1].after[0]: no step "nope"`},
		{"itself", `{"name":"a","agent":"x","after":["a"]}`, `steps[0].after[0]: step "a" cannot wait for itself`},
		{"named twice", `{"name":"a","agent":"x"},{"name":"b","agent":"x","after":["a","a"]}`, `steps[1].after[1]: step "a" is named twice`},
		{"cycle", `{"name":"a","agent":"x","after":["c"]},{"name":"b","agent":"x","after":["a"]},{"name":"c","agent":"x","after":["b"]}`,
			"steps wait for each other in a cycle"},
		{"results of a sibling", `{"name":"a","agent":"http","after":[],"http":{"url":"http://x/"}},{"name":"b","after":[],"http":{"url":"http://x/{{ results.a.id }}"}}`,
			`no step "a" always runs before this one`},
		{"condition that does not parse", `{"name":"a","agent":"x","when":"order.x =="}`, "steps[0].when: invalid condition"},
		{"condition on an unknown root", `{"name":"a","agent":"x","when":"orders.x == 1"}`, `unknown name "orders"`},
		{"condition on a sibling's result", `{"name":"a","agent":"x","after":[]},{"name":"b","agent":"x","after":[],"when":"results.a.ok"}`,
			`no step "a" always runs before this one`},
		{"condition on a task field that is not there", `{"name":"a","agent":"x","when":"task.owner == 'me'"}`, "task has id, workflow and version"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := domain.ParseDefinition([]byte(`{"name":"w","steps":[` + tc.steps + `]}`))
			require.ErrorIs(t, err, domain.ErrInvalidWorkflow)
			assert.Contains(t, err.Error(), tc.problem)
		})
	}
	t.Run("results and conditions of ancestors", func(t *testing.T) {
		_, err := domain.ParseDefinition([]byte(`{"name":"w","steps":[
			{"name":"a","agent":"x"},
			{"name":"b","agent":"x","after":["a"]},
			{"name":"c","agent":"x","after":["a"]},
			{"name":"d","after":["b","c"],"when":"results.a.ok and results.c.n > 2","http":{"url":"http://x/{{ results.a.id }}/{{ results.b.id }}"}}]}`))
		require.NoError(t, err)
	})
}

func TestPredecessorsDefaultToTheStepBefore(t *testing.T) {
	w := graphWorkflow(t)
	assert.Nil(t, w.Predecessors(0))
	assert.Equal(t, []string{"account"}, w.Predecessors(1))
	assert.Equal(t, []string{"storage", "email"}, w.Predecessors(3))
	assert.Equal(t, []string{}, w.Predecessors(4), "after: [] starts at once")
	assert.Equal(t, []string{"reserve-inventory"}, wf.Predecessors(1), "a list without after runs in order")
	doc, err := w.MarshalDefinition()
	require.NoError(t, err)
	again, err := domain.ParseDefinition(doc)
	require.NoError(t, err)
	assert.True(t, w.Equal(again))
	assert.Equal(t, []string{}, again.Steps[4].After, "an empty after survives its encoding")
	old, err := wf.MarshalDefinition()
	require.NoError(t, err)
	assert.NotContains(t, string(old), "after", "a definition without after encodes as before")
}

func TestGraphDispatchesReadyStepsAndJoins(t *testing.T) {
	w := graphWorkflow(t)
	g := newGraphTask(t, w, `{"orderId":"o-1"}`)
	assert.Equal(t, []string{"StepDispatched:account", "StepSkipped:newsletter"}, names(g.events[1:]),
		"the first step and the one after nothing start at once; a false condition skips")
	assert.Equal(t, []string{"StepSucceeded:account", "StepDispatched:storage", "StepDispatched:email"}, names(g.reply("account", false, "", `{"id":7}`)),
		"both branches start together")
	task := g.task()
	assert.Len(t, task.InFlight(), 2)
	assert.NotEqual(t, task.Step("storage").IdempotencyKey, task.Step("email").IdempotencyKey)
	assert.Equal(t, []string{"StepSucceeded:email"}, names(g.reply("email", false, "", "")), "the join waits for both")
	assert.Equal(t, []string{"StepSucceeded:storage", "StepDispatched:ship"}, names(g.reply("storage", false, "", "")))
	assert.Equal(t, []string{"StepSucceeded:ship", "TaskProcessed"}, names(g.reply("ship", false, "", "")))
	task = g.task()
	assert.Equal(t, domain.StepStateSkipped, task.Step("newsletter").State)
	assert.Equal(t, domain.StepStateProcessed, task.Step("ship").State)
	assert.Equal(t, map[string]json.RawMessage{"account": json.RawMessage(`{"id":7}`)}, task.ResultsFor(w, "ship"),
		"a step reads the results of its ancestors")
}

func TestConditionTrueDispatches(t *testing.T) {
	g := newGraphTask(t, graphWorkflow(t), `{"orderId":"o-1","marketing":true}`)
	assert.Equal(t, []string{"StepDispatched:account", "StepDispatched:newsletter"}, names(g.events[1:]))
}

func TestSkippedStepLetsItsSuccessorsRun(t *testing.T) {
	w, err := domain.ParseDefinition([]byte(`{"name":"w","defaults":{"budget":"5s"},"steps":[
		{"name":"a","agent":"x","when":"order.tier in ['gold', 'platinum']"},
		{"name":"b","agent":"x"}]}`))
	require.NoError(t, err)
	g := newGraphTask(t, w, `{"tier":"tin"}`)
	assert.Equal(t, []string{"StepSkipped:a", "StepDispatched:b"}, names(g.events[1:]))
	skipped := g.events[1].(domain.StepSkipped)
	assert.Equal(t, "order.tier in ['gold', 'platinum']", skipped.Condition)
}

// TestCompensationInReverseOrderOfCompletion: email ends before storage,
// so storage, the later, is undone first, though the list has it first;
// each compensation waits for the one before it.
func TestCompensationInReverseOrderOfCompletion(t *testing.T) {
	g := newGraphTask(t, graphWorkflow(t), `{}`)
	g.reply("account", false, "", "")
	g.reply("email", false, "", "")
	g.reply("storage", false, "", "")
	assert.Equal(t, []string{"StepFailed:ship", "CompensationRequested", "CompensationDispatched:storage"},
		names(g.reply("ship", false, domain.FailurePermanent, "")), "a step refused for good has nothing to undo")
	assert.Equal(t, "ship", g.task().FailedStep, "the step that failed is named while compensating")
	assert.Equal(t, []string{"StepCompensated:storage", "CompensationDispatched:email"}, names(g.reply("storage", true, "", "")))
	assert.Equal(t, []string{"StepCompensated:email", "CompensationDispatched:account"}, names(g.reply("email", true, "", "")))
	assert.Equal(t, []string{"StepCompensated:account", "TaskCompensated"}, names(g.reply("account", true, "", "")),
		"the skipped newsletter is never compensated")
	task := g.task()
	assert.Equal(t, domain.StateCompensated, task.State)
	assert.Equal(t, "ship", task.FailedStep, "a compensated task names the step that failed")
	assert.Equal(t, domain.StepStateSkipped, task.Step("newsletter").State)
	assert.Nil(t, task.Step("newsletter").Compensation)
}

// TestFailureAbandonsTheSiblingAndWaitsForIt: a branch fails while the
// other is in flight; nothing is undone until that one answers, and then
// it is undone first: it ended last.
func TestFailureAbandonsTheSiblingAndWaitsForIt(t *testing.T) {
	g := newGraphTask(t, graphWorkflow(t), `{}`)
	g.reply("account", false, "", "")
	assert.Equal(t, []string{"StepFailed:storage", "CompensationRequested"}, names(g.reply("storage", false, domain.FailurePermanent, "")),
		"the sibling in flight is waited for")
	assert.Equal(t, []string{"StepSucceeded:email", "CompensationDispatched:email"}, names(g.reply("email", false, "", `{"sent":1}`)),
		"a late success of the abandoned sibling is undone, with its result")
	assert.Equal(t, []string{"StepCompensated:email", "CompensationDispatched:account"}, names(g.reply("email", true, "", "")))
	assert.Equal(t, domain.StepStatePending, g.task().Step("ship").State, "the join never ran")
}

// TestInDoubtSiblingIsCompensated: the sibling times out while the task
// compensates; it may have taken effect, so it is undone too.
func TestInDoubtSiblingIsCompensated(t *testing.T) {
	g := newGraphTask(t, graphWorkflow(t), `{}`)
	g.reply("account", false, "", "")
	g.reply("storage", false, domain.FailurePermanent, "")
	task := g.task()
	email := task.Step("email")
	events, err := task.TimeOut(g.wf, "email", false, email.Attempt, at(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, []string{"StepTimedOut"}, names(events), "a compensating task only records the timeout")
	g.events = append(g.events, events...)
	assert.Equal(t, []string{"CompensationDispatched:email"}, names(g.task().Next(g.wf, d)))
}

// TestErrorWaitsForTheBranchesInFlight: a step whose policy is error stops
// the task only once its siblings answered, so that nothing is in flight
// while the task waits for an operator.
func TestErrorWaitsForTheBranchesInFlight(t *testing.T) {
	w, err := domain.ParseDefinition([]byte(`{"name":"w","defaults":{"budget":"5s","attempts":1,"onExhausted":"error"},"steps":[
		{"name":"a","agent":"x","after":[]},
		{"name":"b","agent":"x","after":[]}]}`))
	require.NoError(t, err)
	g := newGraphTask(t, w, `{}`)
	assert.Equal(t, []string{"StepDispatched:a", "StepDispatched:b"}, names(g.events[1:]))
	assert.Equal(t, []string{"StepFailed:a"}, names(g.reply("a", false, domain.FailurePermanent, "")))
	assert.Equal(t, []string{"StepSucceeded:b", "TaskFailed"}, names(g.reply("b", false, "", "")))
	assert.Equal(t, "a", g.task().FailedStep)
}

func TestSequentialCompensationUnchanged(t *testing.T) {
	// The order workflow has no after: its steps run one after another and
	// are undone in reverse list order, as before graphs.
	events := with(processed(2), dispatched("schedule-shipping", 1))
	task := domain.Fold("o-1", events)
	got, err := task.RecordReply(wf, reply("schedule-shipping", 1, domain.FailureTransient), at(0))
	require.NoError(t, err)
	assert.Equal(t, []string{"StepFailed:schedule-shipping", "StepRetryScheduled"}, names(got))
	got, err = domain.Fold("o-1", events).Cancel(wf, "ops", "", d)
	require.NoError(t, err)
	events = append(events, got...)
	events = append(events, domain.StepTimedOut{TaskID: "o-1", Step: "schedule-shipping", Attempt: 1, CompleteBy: t0, At: t0})
	var order []string
	for i := 0; i < 4; i++ {
		next := domain.Fold("o-1", events).Next(wf, d)
		require.NotEmpty(t, next)
		events = append(events, next...)
		if c, ok := next[0].(domain.CompensationDispatched); ok {
			order = append(order, c.Step)
			events = append(events, domain.StepCompensated{TaskID: "o-1", Step: c.Step, Attempt: 1, At: t0})
		}
	}
	assert.Equal(t, []string{"schedule-shipping", "charge-payment", "reserve-inventory"}, order)
	assert.Equal(t, domain.StateCompensated, domain.Fold("o-1", events).State)
}

func TestConditions(t *testing.T) {
	order := json.RawMessage(`{"marketing":true,"total":42.5,"tier":"gold","tags":["a","b"],"coupon":null,"n":{"x":[1,2,3]}}`)
	results := map[string]json.RawMessage{"pay": json.RawMessage(`{"ok":true,"id":"p-1"}`)}
	task := map[string]any{"id": "o-1", "workflow": "w", "version": json.Number("2")}
	cases := map[string]bool{
		"order.marketing == true":                     true,
		"order.marketing":                             true,
		"order.missing":                               false,
		"not order.missing":                           true,
		"order.missing == null":                       false,
		"order.missing != 1":                          false,
		"order.coupon == null":                        true,
		"order.coupon":                                false,
		"order.total > 40 and order.total < 50":       true,
		"order.total >= 42.5 and order.total <= 42.5": true,
		"order.total == 42.50":                        true,
		"order.tier in ['gold', \"platinum\"]":        true,
		"'b' in order.tags":                           true,
		"'c' in order.tags":                           false,
		"order.n.x[1] == 2":                           true,
		"order.n.x[7] == 2":                           false,
		"order['tier'] == 'gold'":                     true,
		"results.pay.ok and results.pay.id == 'p-1'":  true,
		"results.other.ok or task.version == 2":       true,
		"task.id == 'o-1' and task.workflow != 'x'":   true,
		"not (order.tier == 'gold' or false)":         false,
		"order.tier < 'h'":                            true,
		"order.tier < 1":                              false,
		"order.tags == ['a', 'b']":                    true,
	}
	for text, want := range cases {
		c, err := domain.ParseCondition(text)
		require.NoError(t, err, text)
		assert.Equal(t, want, c.Eval(order, results, task), text)
		assert.Equal(t, text, c.String())
	}
	for _, bad := range []string{"", "order.", "order.x ==", "(order.x", "[1, 2", "order.x = 1", "'open", "order.x && true", "foo",
		strings.Repeat("(", 40) + "true" + strings.Repeat(")", 40), strings.Repeat("not ", 40) + "true", strings.Repeat("x", domain.MaxConditionBytes+1)} {
		_, err := domain.ParseCondition(bad)
		assert.ErrorIs(t, err, domain.ErrInvalidCondition, bad)
	}
}

// FuzzParseCondition: any text parses or is refused with
// ErrInvalidCondition, and what parses evaluates without a panic.
func FuzzParseCondition(f *testing.F) {
	for _, seed := range []string{"order.marketing == true", "not order.x", "order.a in [1, 'b', null]", "results.s.v > 2 or task.id != 'x'",
		"(order.a)", "order['k'][0] <= -1.5e3"} {
		f.Add(seed, `{"a":1,"marketing":true,"k":[2]}`)
	}
	f.Fuzz(func(t *testing.T, text, order string) {
		c, err := domain.ParseCondition(text)
		if err != nil {
			require.ErrorIs(t, err, domain.ErrInvalidCondition)
			return
		}
		c.Eval(json.RawMessage(order), map[string]json.RawMessage{"s": json.RawMessage(order)}, map[string]any{"id": "o-1"})
		for _, p := range c.Paths() {
			require.NotEmpty(t, p)
		}
	})
}

// TestRecordedHistoryDecidesAsBefore replays the recorded history of a
// task of the sequential order workflow (audittest): at every point where
// the scheduler decided, Next decides the same again, and the history folds
// to the same state with graphs as without.
func TestRecordedHistoryDecidesAsBefore(t *testing.T) {
	history := audittest.History()
	var events []domain.Event
	for i, r := range history {
		e, err := r.Decode()
		require.NoError(t, err)
		if i > 0 && r.Metadata.Actor == "scheduler/a" {
			switch e.(type) {
			case domain.StepDispatched, domain.CompensationDispatched, domain.TaskCompensated:
				got := domain.Fold("o-1", events).Next(wf, domain.Decision{Now: r.Recorded, Actor: "scheduler/a"})
				require.NotEmpty(t, got, "revision %d", i)
				assert.Equal(t, names([]domain.Event{e}), names(got[:1]), "revision %d", i)
			}
		}
		events = append(events, e)
	}
	task := domain.Fold("o-1", events)
	assert.Equal(t, domain.StateCompensated, task.State)
	for _, s := range task.Steps {
		assert.Equal(t, domain.StepStateCompensated, s.State, s.Name)
	}
}

// FuzzGraphDecisions drives a task of the diamond workflow with replies,
// timeouts, cancellations and retries in any order, and checks what the
// decisions record: no step dispatched before the steps it waits for are
// done, none after the task compensates, no attempt twice, no skipped step
// run or undone, and undos only with nothing in flight, one at a time.
func FuzzGraphDecisions(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 0, 1, 0, 1}, false)
	f.Add([]byte{0, 1, 3, 1, 4, 0, 1}, true)
	f.Add([]byte{0, 1, 2, 4, 5, 1, 6, 0, 7, 1}, false)
	f.Fuzz(func(t *testing.T, ops []byte, marketing bool) {
		w := graphWorkflow(t)
		order := `{"marketing":false}`
		if marketing {
			order = `{"marketing":true}`
		}
		history := []domain.Event{domain.TaskSubmitted{TaskID: "o-1", Workflow: w.Name, Steps: w.StepNames(), Order: json.RawMessage(order), SubmittedAt: t0}}
		now := t0
		seen := map[string]bool{}
		for i, op := range ops {
			if i > 200 {
				break
			}
			task := domain.Fold("o-1", history)
			dec := domain.Decision{Now: now, Actor: "fuzz", Random: float64(op%10) / 10}
			inFlight := task.InFlight()
			var events []domain.Event
			switch op % 8 {
			case 0:
				events = task.Next(w, dec)
			case 1, 2, 3:
				if len(inFlight) > 0 {
					a := inFlight[int(op/8)%len(inFlight)]
					r := domain.Reply{Step: a.Step, Compensation: a.Compensation, Attempt: a.Attempt, Succeeded: op%8 == 1,
						Failure: map[byte]domain.FailureKind{2: domain.FailureTransient, 3: domain.FailurePermanent}[op%8]}
					events, _ = task.RecordReply(w, r, dec)
				}
			case 4:
				if len(inFlight) > 0 {
					a := inFlight[int(op/8)%len(inFlight)]
					now = a.CompleteBy
					dec.Now = now
					events, _ = task.TimeOut(w, a.Step, a.Compensation, a.Attempt, dec)
				}
			case 5:
				events, _ = task.Cancel(w, "fuzz", "", dec)
			case 6:
				events, _ = task.Resubmit(w, "", "fuzz", dec)
			case 7:
				now = now.Add(time.Duration(op) * 100 * time.Millisecond)
			}
			cur := task.Clone()
			for _, e := range events {
				switch e := e.(type) {
				case domain.StepDispatched:
					key := "dispatch/" + e.Step + "/" + strconv.Itoa(e.Attempt)
					require.False(t, seen[key], "%s twice; ops %v", key, ops[:i+1])
					seen[key] = true
					require.False(t, cur.Compensating, "%s dispatched while compensating; ops %v", e.Step, ops[:i+1])
					for j := range w.Steps {
						if w.Steps[j].Name == e.Step {
							for _, p := range w.Predecessors(j) {
								st := cur.Step(p).State
								require.True(t, st == domain.StepStateProcessed || st == domain.StepStateSkipped,
									"%s dispatched while %s is %s; ops %v", e.Step, p, st, ops[:i+1])
							}
						}
					}
					require.False(t, e.Step == "newsletter" && !marketing, "newsletter dispatched though its condition is false")
				case domain.CompensationDispatched:
					require.NotEqual(t, domain.StepStateSkipped, cur.Step(e.Step).State, "skipped step compensated; ops %v", ops[:i+1])
					for _, s := range cur.Steps {
						require.False(t, s.InFlight(), "%s compensated while %s in flight; ops %v", e.Step, s.Name, ops[:i+1])
						require.False(t, s.Compensation.InFlight(), "%s compensated while %s's compensation in flight; ops %v", e.Step, s.Name, ops[:i+1])
					}
				}
				cur.Apply(e)
			}
			history = append(history, events...)
		}
	})
}

// TestRetryTakesTheStepThatStoppedTheTask: two branches failed; an
// operator's retry without a step name takes the one that stopped the task.
func TestRetryTakesTheStepThatStoppedTheTask(t *testing.T) {
	w, err := domain.ParseDefinition([]byte(`{"name":"w","defaults":{"budget":"5s","attempts":1,"onExhausted":"error"},"steps":[
		{"name":"a","agent":"x","after":[]},
		{"name":"b","agent":"x","after":[]}]}`))
	require.NoError(t, err)
	g := newGraphTask(t, w, `{}`)
	g.reply("b", false, domain.FailurePermanent, "")
	assert.Equal(t, []string{"StepFailed:a", "TaskFailed"}, names(g.reply("a", false, domain.FailurePermanent, "")))
	task := g.task()
	require.Equal(t, domain.StateError, task.State)
	events, err := task.Resubmit(w, "", "ops", d)
	require.NoError(t, err)
	assert.Equal(t, task.FailedStep, events[0].(domain.StepResubmitted).Step)
}

// TestGoValuesTakeTheSameShapes: a workflow built in Go (the SDK's
// engine.Config.Workflows) has After and When as a file has after and
// when, and is checked the same way.
func TestGoValuesTakeTheSameShapes(t *testing.T) {
	step := func(name string, after []string, when string) domain.StepDefinition {
		return domain.StepDefinition{Name: name, Agent: "x", Budget: time.Second, MaxAttempts: 1, After: after, When: when}
	}
	w := &domain.Workflow{Name: "go", Steps: []domain.StepDefinition{step("a", nil, ""), step("b", []string{}, "order.vip"),
		step("c", []string{"a", "b"}, "")}}
	require.NoError(t, w.Validate())
	assert.Equal(t, []string{"StepDispatched:a", "StepSkipped:b"}, names(newGraphTask(t, w, `{}`).events[1:]))
	w.Steps[0].After = []string{"c"}
	err := w.Validate()
	require.ErrorIs(t, err, domain.ErrInvalidWorkflow)
	assert.Contains(t, err.Error(), "cycle")
	w.Steps[0].After, w.Steps[1].When = nil, "order.vip =="
	assert.ErrorContains(t, w.Validate(), "steps[1].when: invalid condition")
}
