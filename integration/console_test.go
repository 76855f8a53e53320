package integration_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sagaengine/saga/adapters/client"
	"github.com/sagaengine/saga/adapters/demo"
	"github.com/sagaengine/saga/adapters/engine"
	"github.com/sagaengine/saga/adapters/httpapi"
	"github.com/sagaengine/saga/domain"
	"github.com/sagaengine/saga/domain/protocol"
)

// chromium finds a Chromium or Chrome binary ($SAGA_CHROMIUM first), or
// skips the test (fails it when SAGA_REQUIRE_TOOLS is set): the console's
// browser tests need one, and .ci/run installs Debian's chromium.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SAGA_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SAGA_REQUIRE_TOOLS") != "" {
		t.Fatal("no Chromium binary found, and SAGA_REQUIRE_TOOLS is set (.ci/run installs Debian's chromium)")
	}
	t.Skip("no Chromium binary found (install Debian's chromium, or set SAGA_CHROMIUM): the console's browser tests need one")
	return ""
}

// screenshotDir is where the browser tests save screenshots:
// $SAGA_SCREENSHOTS, else test-output/console in the repository (ignored
// by git), which CI keeps.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("SAGA_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join("..", "test-output", "console")
	}
	dir, err := filepath.Abs(dir)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// browser drives one headless Chromium against a running console.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	shot string
}

func newBrowser(t *testing.T, base, name string) *browser {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)), chromedp.NoSandbox, chromedp.WindowSize(1200, 900),
		chromedp.Flag("disable-dev-shm-usage", true))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return &browser{t: t, ctx: ctx, base: base, shot: filepath.Join(screenshotDir(t), name)}
}

func (b *browser) run(actions ...chromedp.Action) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Run(b.ctx, actions...))
}

// await evaluates a JavaScript condition until it is true, across page
// loads (an evaluation during a reload fails and is tried again).
func (b *browser) await(what, expr string, timeout time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		err := chromedp.Run(b.ctx, chromedp.Evaluate(expr, &ok))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.screenshot("failed-" + strings.Map(func(r rune) rune {
				if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
					return r
				}
				return '-'
			}, what))
			b.t.Fatalf("the page did not show %s within %s (last error %v)", what, timeout, err)
		}
		select {
		case <-b.ctx.Done():
			b.t.Fatalf("waiting for %s: %v", what, b.ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	var png []byte
	// Quality 100 makes a PNG. A page that is reloading has no size yet:
	// try again for a moment.
	var err error
	for range 20 {
		if err = chromedp.Run(b.ctx, chromedp.FullScreenshot(&png, 100)); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := b.shot + "-" + name + ".png"
	require.NoError(b.t, os.WriteFile(path, png, 0o644))
	b.t.Logf("screenshot %s", path)
}

// TestConsoleInABrowser loads the console in headless Chromium against a
// running saga, with API tokens off and on: orders submitted by a client
// appear and move to Processed without a reload, a compensated task shows
// its timeline, Retry on a task in Error brings it back, a dead letter
// shows with its reason, source and payload, the overview counts the
// orders and the agents' commands, and the agents page names the agents.
func TestConsoleInABrowser(t *testing.T) {
	chromium(t)
	if testing.Short() {
		t.Skip("starts saga and a browser")
	}
	for _, auth := range []bool{false, true} {
		name := "tokens-off"
		if auth {
			name = "tokens-on"
		}
		t.Run(name, func(t *testing.T) { consoleScenario(t, name, auth) })
	}
}

func consoleScenario(t *testing.T, name string, auth bool) {
	cfg := engine.Config{Workflows: []*domain.Workflow{fastWorkflow(500 * time.Millisecond)}}
	var secret string
	if auth {
		var line string
		var err error
		secret, line, err = httpapi.NewToken("olga", httpapi.RoleOperator)
		require.NoError(t, err)
		cfg.APITokensFile = filepath.Join(t.TempDir(), "tokens")
		require.NoError(t, os.WriteFile(cfg.APITokensFile, []byte(line+"\n"), 0o600))
	}
	s := startSystem(t, cfg)
	b := newBrowser(t, "http://"+s.app.HTTPAddr, name)

	b.run(chromedp.Navigate(b.base + "/ui"))
	if auth {
		b.run(chromedp.WaitVisible("#token", chromedp.ByID))
		b.screenshot("login")
		b.run(chromedp.SendKeys("#token", secret, chromedp.ByID), chromedp.Submit("#token", chromedp.ByID))
	}
	b.run(chromedp.WaitVisible("#tasks", chromedp.ByID))
	if auth {
		b.await("who is signed in", `document.querySelector(".who strong").textContent === "olga"`, 10*time.Second)
	}
	// A mark on the window that a reload would lose.
	b.run(chromedp.Evaluate(`window.sagaNoReload = true`, nil))

	c, err := client.New(ctx(t, 10*time.Second), client.Config{Brokers: s.app.KafkaBrokers})
	require.NoError(t, err)
	defer c.Close()
	for i := range 3 {
		require.NoError(t, c.Submit(ctx(t, 10*time.Second), fmt.Sprintf("ui-ok-%d", i), map[string]any{"items": []string{"book"}}))
	}
	b.await("three processed orders", `document.querySelectorAll('#tasks tr[data-id^="ui-ok-"] .state.processed').length === 3`, 60*time.Second)
	b.await("the same page, not reloaded", `window.sagaNoReload === true`, time.Second)
	b.screenshot("tasks-processed")

	// Compensated: payment refuses, so the inventory step is undone.
	s.app.Services["payment"].SetFaults(demo.Fault{Mode: demo.FaultPermanent, Rate: 1})
	require.NoError(t, c.Submit(ctx(t, 10*time.Second), "ui-comp-1", nil))
	b.await("the compensated order in the list", `!!document.querySelector('#tasks tr[data-id="ui-comp-1"] .state.compensated')`, 60*time.Second)
	b.run(chromedp.Click(`#tasks tr[data-id="ui-comp-1"] a`, chromedp.ByQuery), chromedp.WaitVisible("#timeline svg", chromedp.ByQuery))
	b.await("compensation bars on the timeline", `document.querySelectorAll('#timeline .lane[data-step="reserve-inventory"] .bar.comp.ok').length >= 1`, 10*time.Second)
	b.await("the failed payment attempt", `document.querySelectorAll('#timeline .lane[data-step="charge-payment"] .bar.failed').length >= 1`, 10*time.Second)
	b.await("the raw history", `document.querySelector('#events').textContent.includes("TaskCompensated")`, 10*time.Second)
	b.screenshot("task-compensated")

	// Error: the compensation keeps failing too; Retry once it is fixed.
	s.app.Services["inventory"].SetFaults(demo.Fault{Mode: demo.FaultTransient, Rate: 1, Compensation: true})
	require.NoError(t, c.Submit(ctx(t, 10*time.Second), "ui-err-1", nil))
	s.awaitTasks([]string{"ui-err-1"}, 60*time.Second, func(t *domain.Task) bool { return t.State == domain.StateError })
	b.run(chromedp.Navigate(b.base + "/ui/?state=Error"))
	b.await("the task in Error in the alerts list", `!!document.querySelector('#tasks tr[data-id="ui-err-1"] .state.error')`, 30*time.Second)
	b.run(chromedp.Click(`#tasks tr[data-id="ui-err-1"] a`, chromedp.ByQuery))
	b.await("the task page in Error", `document.getElementById("task-state") && document.getElementById("task-state").textContent === "Error"`, 10*time.Second)
	b.screenshot("task-error")
	s.app.Services["inventory"].SetFaults()
	require.Eventually(t, func() bool { return !s.app.HTTPHandlers["inventory"].AnyBreakerOpen() }, 10*time.Second, 10*time.Millisecond)
	b.run(chromedp.Click("#retry", chromedp.ByID))
	b.await("the task recovered to Compensated", `document.getElementById("task-state") && document.getElementById("task-state").textContent === "Compensated"`, 60*time.Second)
	b.await("the operator's retry on the timeline", `document.querySelectorAll('#timeline .mark.operator').length >= 1`, 10*time.Second)
	b.screenshot("task-retried")

	// A message saga cannot take lands in saga.deadletter, and on its page.
	s.publish("ui-dead-1", []byte("not json"))
	b.run(chromedp.Navigate(b.base + "/ui/deadletters"))
	for deadline := time.Now().Add(30 * time.Second); ; {
		var found bool
		b.run(chromedp.WaitVisible("#deadletters", chromedp.ByID),
			chromedp.Evaluate(`!!document.querySelector('#deadletters tr[data-key="ui-dead-1"]')`, &found))
		if found {
			break
		}
		require.False(t, time.Now().After(deadline), "the dead letter did not show on its page")
		b.run(chromedp.Reload())
	}
	b.await("the dead letter's reason and payload", `(() => { const r = document.querySelector('#deadletters tr[data-key="ui-dead-1"]');
		return r.textContent.includes("not json") && r.textContent.includes("`+protocol.OrdersTopic+`/") })()`, 5*time.Second)
	b.screenshot("deadletters")

	// The overview counts what this process saw, its agents included.
	b.run(chromedp.Navigate(b.base + "/ui/overview"))
	b.await("processed orders and the agents on the overview", `(() => {
		const row = document.querySelector('#orders tbody tr');
		return !!row && Number(row.querySelectorAll('td')[1].textContent) >= 3 &&
			!!document.querySelector('#agents tr[data-agent="payment"]') })()`, 30*time.Second)
	b.screenshot("overview")

	// The agents page names every agent of the workflow, here without
	// heartbeats: the demo agents send none.
	b.run(chromedp.Navigate(b.base + "/ui/agents"))
	b.await("the workflow's agents on the agents page", `!!document.querySelector('section[data-agent="payment"]') && !!document.querySelector('section[data-agent="inventory"]')`, 10*time.Second)
	b.screenshot("agents")

	// On a phone's width the pages scroll their wide parts, not the page.
	b.run(chromedp.EmulateViewport(390, 844))
	for _, page := range []string{"/ui/", "/ui/tasks/ui-comp-1", "/ui/overview", "/ui/agents"} {
		b.run(chromedp.Navigate(b.base + page))
		b.await("no sideways scrolling on "+page, `document.readyState === "complete" && document.documentElement.scrollWidth <= window.innerWidth`, 10*time.Second)
	}
	b.run(chromedp.Navigate(b.base + "/ui/tasks/ui-comp-1"))
	b.await("the timeline on a narrow window", `!!document.querySelector('#timeline svg')`, 10*time.Second)
	b.screenshot("narrow-task")
}
