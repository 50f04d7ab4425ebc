package dashboard_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/cmd/aegis/internal/lab"
	"github.com/aegislab/aegis/cmd/aegis/internal/lab/dashboard"
	"github.com/aegislab/aegis/internal/testing/chromium"
	"github.com/aegislab/aegis/internal/testing/testenv"
)

var screenshots = flag.Bool("screenshots", false, "write the end-to-end tests' screenshots into docs/ (docs/dashboard-*.png)")

// e2eBudget bounds the whole browser session: the browser is stopped when
// it ends, and every wait fails then.
const e2eBudget = 150 * time.Second

// browser starts headless Chromium for the test and returns its context
// and the JavaScript exceptions its pages threw.
func browser(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	return chromium.Start(t, e2eBudget)
}

// The test: open the page, start none with 3 nodes and see a red
// duplicate; start pg-lease fenced, pause the holder from its button and
// see an amber rejection and no red.
func TestEndToEndInChromium(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx, exceptions := browser(t)
	describe := func() string { // what the page shows, for a failure
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#runs') ? document.querySelector('#runs').innerText : ''`))
		return fmt.Sprintf("the runs on the page:\n%s\nJavaScript exceptions: %v", text, exceptions())
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		err := chromedp.Do(ctx, steps...)
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: not done within the test's %s budget; %s", what, e2eBudget, describe())
		}
		require.NoError(t, err, "%s; %s", what, describe())
	}
	attr := func(sel, name string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).getAttribute(%q) || ''`, sel, name)))
		require.NoError(t, err)
		require.NotEmpty(t, v, "%s has %s", sel, name)
		return v
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
		require.NoError(t, err)
		return n
	}
	shoot := func(name string) {
		t.Helper()
		if !*screenshots {
			return
		}
		// Let the last frame paint (the page draws on animation frames).
		do("wait for a frame", chromedp.Evaluate[chromedp.Void](`new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))`, chromedp.EvalAwaitPromise))
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		path := filepath.Join("..", "..", "..", "..", "..", "docs", name)
		require.NoError(t, os.WriteFile(path, png, 0o644))
		t.Logf("wrote %s", path)
	}
	params := func(ticks string) []chromedp.Action[chromedp.Void] {
		return []chromedp.Action[chromedp.Void]{
			chromedp.SetValue(chromedp.CSS("#nodes"), "3"),
			chromedp.SetValue(chromedp.CSS("#tick"), "400ms"),
			chromedp.SetValue(chromedp.CSS("#ttl"), "500ms"),
			chromedp.SetValue(chromedp.CSS("#work"), "200ms"),
			chromedp.SetValue(chromedp.CSS("#duration"), ticks),
		}
	}

	do("open the page", chromedp.Navigate(h.url), chromedp.WaitReady(chromedp.CSS(`#strategies input[value="none"]`)),
		chromedp.WaitReady(chromedp.CSS(`#strategytable td.avail.ok`))) // availability known

	// none, 3 nodes: every tick red.
	none := `.run[data-strategy="none"]`
	do("start none", append(params("4s"), chromedp.Click(chromedp.CSS(`#start`)))...)
	do("see a red duplicate", chromedp.WaitReady(chromedp.CSS(none+` rect.mark.dup`)))
	do("see none end", chromedp.WaitReady(chromedp.CSS(none+`[data-state="done"] .verdict[data-checker]`)))
	do("see the group done", chromedp.WaitReady(chromedp.CSS(`#grouphead[data-state="done"]`)))
	// The page's verdict is the report's. Two nodes that read the same
	// balance in one tick (a race, though all three read at each tick)
	// force a violation, which links its visualisation.
	rep := h.runReport(t, attr(none, "data-run"))
	if sameRead(rep.Events) {
		require.Equal(t, lab.CheckViolation, rep.Checker)
	}
	require.Equal(t, 1, count(none+` .verdict[data-checker="`+rep.Checker+`"]`), "the page shows the report's verdict; %s", describe())
	require.Equal(t, 1, count(none+` .verdict[data-verdict="`+rep.Verdict+`"]`), "the page marks the run's verdict (ok, harmed or inconclusive); %s", describe())
	require.Equal(t, rep.Checker == lab.CheckViolation, count(none+` .verdict a[href*="/visualisation"]`) > 0, "a violation links its visualisation")
	shoot("dashboard-none.png")

	// pg-lease fenced: pause the holder past its TTL; its write turns amber.
	pg := `.run[data-strategy="pg-lease"][data-fenced="true"]`
	do("choose pg-lease fenced", append(params("12s"), // long enough for a holder to enter on a loaded machine
		chromedp.Click(chromedp.CSS(`#strategies input[value="none"]`)),
		chromedp.Click(chromedp.CSS(`#strategies input[value="pg-lease"]`)),
		chromedp.Click(chromedp.CSS(`input[name="fence"][value="on"]`)),
	)...)
	// The pause waits for a holder inside the critical section. A run
	// whose nodes the machine ran late for all of it ends with the
	// pause's note "nothing to target" and the note that says why: that
	// run says nothing about the pause, and one more is started. A run
	// without the pause and without a cause fails the test.
	for attempt := 1; ; attempt++ {
		// Clicks by script: the page redraws a running run's row, and a
		// mouse click at coordinates found a moment before can miss it.
		do("start pg-lease fenced",
			jsClick(`#start`),
			chromedp.WaitReady(chromedp.CSS(pg+`[data-state="running"] button[data-chaos="pause"]:not([disabled])`)),
			chromedp.SetValue(chromedp.CSS(pg+` .chaos-for`), "1.5"),
			jsClick(pg+` button[data-chaos="pause"]`),
		)
		do("see the pause land or the run end", chromedp.WaitReady(chromedp.CSS(pg+` rect.band.pause, `+pg+`[data-state="done"]`)))
		if count(pg+` rect.band.pause`) > 0 {
			break
		}
		notes, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).innerText`, pg)))
		require.NoError(t, err)
		require.Contains(t, notes, "nothing to target", "a run that ended without the pause says why; %s", describe())
		late := strings.Contains(notes, lab.MachineLate) || strings.Contains(notes, "the machine is too busy") || strings.Contains(notes, "slow to answer the lab")
		require.True(t, late, "the run ended before a holder entered, and its notes name no cause (the machine ran no node late): %q", notes)
		require.Less(t, attempt, 2, "a second run ended before a holder entered: %q", notes)
		t.Logf("run %d ended before a holder entered, and says why (%q); starting one more", attempt, notes)
		do("see the group done", chromedp.WaitReady(chromedp.CSS(`#grouphead[data-state="done"]`)))
	}
	do("see the pause land", chromedp.WaitReady(chromedp.CSS(pg+` rect.band.pause`)))
	do("see pg-lease end", chromedp.WaitReady(chromedp.CSS(pg+`[data-state="done"] .verdict[data-checker="ok"]`)))
	do("see the group done", chromedp.WaitReady(chromedp.CSS(`#grouphead[data-state="done"]`)))
	require.Zero(t, count(pg+` rect.mark.dup`), "no red: nothing applied twice; %s", describe())
	// Whether another node entered the paused holder's tick before it
	// resumed is a race; once one did, the refusal is forced, and amber.
	if _, ok := takenOver(h.runReport(t, attr(pg, "data-run")).Events); ok {
		require.Positive(t, count(pg+` rect.mark.stale`), "an amber rejection; %s", describe())
	}
	require.Zero(t, count(`.run[data-strategy="none"]`), "the page shows the new run, not the old one")
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(pg+` .msg`)))
	require.NoError(t, err)
	require.Contains(t, msg, "injected pause:holder@0s+1.5s")

	require.Empty(t, exceptions(), "the page threw no JavaScript exception")
	require.False(t, strings.Contains(describe(), "Did not start"))
}

// A dashboard with a token, as a newcomer meets it: the page asks for the
// token, asks again when it is refused, and starts runs with the right one;
// a nodes field of 0 is refused by name; the comparison shows the group
// just started, not one from before.
func TestEndToEndTokenAndComparison(t *testing.T) {
	t.Parallel()
	testenv.Reserve(t, 2, "a browser and a preset's runs")
	const token = "e2e-secret"
	h := newHarness(t, &dashboard.Config{Token: token})
	ctx, exceptions := browser(t)
	describe := func() string {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		return fmt.Sprintf("the page:\n%s\nJavaScript exceptions: %v", text, exceptions())
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		require.NoError(t, chromedp.Do(ctx, steps...), "%s; %s", what, describe())
	}
	eval := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		require.NoError(t, err)
		return v
	}
	tokenBar := func() bool {
		t.Helper()
		return eval(`String(!document.querySelector('#tokenbar').hidden)`) == "true"
	}
	formMsg := func() string { t.Helper(); return eval(`document.querySelector('#formmsg').textContent`) }
	// Two runs side by side (none and pg-unique), two short ticks each.
	twoRuns := []chromedp.Action[chromedp.Void]{
		chromedp.SetValue(chromedp.CSS("#nodes"), "2"),
		chromedp.SetValue(chromedp.CSS("#tick"), "200ms"),
		chromedp.SetValue(chromedp.CSS("#ttl"), "300ms"),
		chromedp.SetValue(chromedp.CSS("#work"), "50ms"),
		chromedp.SetValue(chromedp.CSS("#duration"), "400ms"),
	}

	do("open the page without the token", chromedp.Navigate(h.url), chromedp.WaitReady(chromedp.CSS(`#strategytable td.avail.ok`)))
	require.True(t, tokenBar(), "the page asks for the token")

	do("start with a wrong token", append(twoRuns,
		chromedp.SetValue(chromedp.CSS("#token"), "not-it"), chromedp.Click(chromedp.CSS("#tokensave")),
		chromedp.Click(chromedp.CSS(`#strategies input[value="pg-unique"]`)),
		chromedp.Click(chromedp.CSS("#start")),
		chromedp.WaitReady(chromedp.CSS(`#formmsg.error`)))...)
	require.Equal(t, "wrong token", formMsg())
	require.True(t, tokenBar(), "a refused token is asked for again")

	do("start with the token", chromedp.SetValue(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#tokensave")),
		chromedp.SetValue(chromedp.CSS("#nodes"), "0"), chromedp.Click(chromedp.CSS("#start")),
		chromedp.WaitReady(chromedp.CSS(`#formmsg.error`)))
	require.False(t, tokenBar())
	require.Contains(t, formMsg(), "nodes 0: want 1 to 16", "0 nodes is refused, not run with the default")
	require.NotContains(t, formMsg(), "--", "in the form's words, not the aegis command's flags")

	for i := range 2 {
		do(fmt.Sprintf("start group %d", i+1), append(twoRuns, chromedp.Click(chromedp.CSS("#start")),
			chromedp.WaitReady(chromedp.CSS(`#grouphead[data-state="running"]`)),
			chromedp.WaitReady(chromedp.CSS(`#grouphead[data-state="done"]`)))...)
		current := eval(`document.querySelector('#history li.current').dataset.group`)
		require.Equal(t, current, eval(`document.querySelector('#comparegroup').value`), "the comparison shows the group just started")
		require.Equal(t, "2", eval(`String(document.querySelectorAll('#comparetable tbody tr').length)`))
	}
	require.Empty(t, exceptions(), "the page threw no JavaScript exception")
}
