package console_test

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/internal/testing/chromium"
	"github.com/aegislab/aegis/internal/testing/historytest"
	"github.com/aegislab/aegis/schedule"
)

var screenshots = flag.Bool("screenshots", false, "write the end-to-end test's screenshots into docs/ (docs/console-*.png)")

// An operator in Chromium: the overview, the held lease with its token,
// the stuck run, a schedule paused through its confirmation, the fence's
// refusal.
func TestEndToEndInChromium(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ts := serve(t, &console.Config{DB: f.db})
	page := chromium.Open(t, 60*time.Second)
	ctx, exceptions, text, do := page.Ctx, page.Exceptions, page.Text, page.Do
	shoot := func(name string) {
		t.Helper()
		if *screenshots {
			page.Screenshot("../docs/" + name)
		}
	}

	do("open the overview", chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`.cards`)))
	require.Contains(t, text(), "1\nstuck runs")
	do("open the leases", chromedp.Click(chromedp.CSS(`nav a[href="/leases"]`)), chromedp.WaitVisible(chromedp.CSS(`#leases`)))
	held, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`tr[data-key="invoice-export/2026-10"] .token`)))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(f.held.Token), held)
	require.NotContains(t, text(), f.owner)
	shoot("console-leases.png")

	do("open the schedules", chromedp.Click(chromedp.CSS(`nav a[href="/schedules"]`)), chromedp.WaitVisible(chromedp.CSS(`#catalog`)))
	stuck, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`tr.stuck`)))
	require.NoError(t, err)
	require.Contains(t, stuck, "web-2")
	require.Contains(t, stuck, "73")
	shoot("console-schedules.png")
	do("ask to pause", chromedp.Click(chromedp.CSS(`tr[data-schedule="export"] a.button`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	require.Contains(t, text(), "No replica starts a tick")
	do("confirm", chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="export"][data-paused="true"]`)))
	require.Contains(t, text(), "Paused: no replica starts a tick of it from now on")
	cat, err := schedule.NewCatalog(t.Context(), f.db, nil)
	require.NoError(t, err)
	e, err := cat.Get(t.Context(), "export")
	require.NoError(t, err)
	require.True(t, e.Paused, "the page's pause is in the catalog")

	do("open the fence", chromedp.Click(chromedp.CSS(`nav a[href="/fence"]`)), chromedp.WaitVisible(chromedp.CSS(`#fence`)))
	refusals, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`tr[data-resource="ledger/2026-10"]`)))
	require.NoError(t, err)
	require.Contains(t, refusals, "41")
	require.Contains(t, refusals, "40")
	shoot("console-fence.png")
	require.Empty(t, exceptions())
}

// An operator in Chromium: the overview counts the missed ticks; a
// schedule whose tick ran twice shows its two attempts, the refused one
// marked and the successor's linked to its trace; a schedule no replica
// runs shows its missed ticks with their cause. Real schedulers made them.
func TestAttemptHistoryInChromium(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := historytest.Make(t, historytest.OpenPostgres(t))
	// A scheduler that traces writes its attempts' trace ids; these did
	// not trace: the successor's attempt gets the id one would have.
	_, err := f.db.Exec(`UPDATE aegis_schedule_run_attempt SET trace_id = $1 WHERE job = 'nightly' AND token = $2`, traceID, int64(h.Successor.Token))
	require.NoError(t, err)
	ts := serve(t, &console.Config{DB: f.db, TraceURL: "http://localhost:16686/trace/{trace_id}"})
	page := chromium.Open(t, 60*time.Second)
	ctx, exceptions, text, do := page.Ctx, page.Exceptions, page.Text, page.Do
	eval := func(what, js string) []string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](js))
		require.NoError(t, err, what)
		return v
	}

	do("open the overview", chromedp.Navigate(ts.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#missed-hour`)))
	require.Contains(t, text(), fmt.Sprintf("%d\nmissed ticks in the last hour: orphan %d", h.AllMissed, len(h.Missed)), "orphan the most missed")

	require.Equal(t, []string{"rgb(179, 38, 30)", "rgb(29, 35, 48)"},
		eval("the cards' colours", `[getComputedStyle(document.querySelector('#card-refused')).color, getComputedStyle(document.querySelector('#card-lost')).color]`),
		"a card with trouble is marked, one without is not")
	do("open the refused attempts from their card", chromedp.Click(chromedp.CSS(`#card-refused`)), chromedp.WaitVisible(chromedp.CSS(`#shown`)))
	require.Equal(t, []string{fmt.Sprintf("nightly refused holder %d", h.Holder.Token)},
		eval("the refused attempts", `[...document.querySelectorAll('table.attempts tbody tr')].map(r => [r.dataset.job, r.dataset.state, r.cells[3].innerText, r.cells[4].innerText].join(' '))`))
	require.Contains(t, text(), "1 attempt refused by the fence of every schedule in the last 24h.")

	do("open the schedules", chromedp.Click(chromedp.CSS(`nav a[href="/schedules"]`)), chromedp.WaitVisible(chromedp.CSS(`#history`)))
	if *screenshots {
		page.Screenshot("../docs/console-attempts.png")
	}
	do("open nightly from its attempt", chromedp.Click(chromedp.CSS(`table.attempts tr[data-job="nightly"] a`)),
		chromedp.WaitVisible(chromedp.CSS(`tr.lost[data-job="nightly"][data-state="refused"]`)))
	require.Equal(t, []string{
		fmt.Sprintf("succeeded 2 successor %d", h.Successor.Token),
		fmt.Sprintf("refused 1 holder %d", h.Holder.Token),
	}, eval("the attempts", `[...document.querySelectorAll('table.attempts tbody tr')].map(r => [r.dataset.state, r.cells[2].innerText, r.cells[3].innerText, r.cells[4].innerText].join(' '))`),
		"one tick, two attempts, the successor's first")
	require.Equal(t, []string{"rgb(255, 241, 240)", "rgb(179, 38, 30)"},
		eval("the lost row's colours", `[getComputedStyle(document.querySelector('tr.lost td')).backgroundColor, getComputedStyle(document.querySelector('tr.lost b.warn')).color]`),
		"the refused attempt is marked as a stuck run is")
	require.Equal(t, []string{"http://localhost:16686/trace/" + traceID, traceID},
		eval("the trace link", `[...document.querySelectorAll('table.attempts a.trace')].flatMap(a => [a.href, a.innerText])`))
	require.Contains(t, text(), "No missed tick on record.")

	do("open orphan from its missed tick", chromedp.Navigate(ts.URL+"/schedules"), chromedp.WaitVisible(chromedp.CSS(`#missed`)),
		chromedp.Click(chromedp.CSS(`table.missed tr[data-job="orphan"] a`)), chromedp.WaitVisible(chromedp.CSS(`tr.missed[data-job="orphan"]`)))
	missed := eval("the missed ticks", `[...document.querySelectorAll('table.missed tbody tr')].map(r => [r.cells[1].title, r.cells[2].innerText, r.cells[4].innerText].join(' '))`)
	require.Len(t, missed, len(h.Missed))
	for i, m := range h.Missed {
		require.Equal(t, instant(m.Fire)+" unbound watcher", missed[i])
	}
	require.Contains(t, text(), `has no handler "absent"`)
	require.Contains(t, text(), "No attempt yet.")
	require.Empty(t, exceptions())
}
