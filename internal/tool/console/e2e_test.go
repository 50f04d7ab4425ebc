package console_test

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/internal/tool/chromium"
	"github.com/aegislab/aegis/internal/tool/console"
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
			page.Screenshot("../../../docs/" + name)
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
