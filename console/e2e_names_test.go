package console_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/aegislab/aegis/console"
	"github.com/aegislab/aegis/internal/testing/chromium"
	"github.com/aegislab/aegis/lease/pglease"
	"github.com/aegislab/aegis/schedule"
)

// Names are path segments of the console's links, escaped: in Chromium,
// pausing "zz/../victim" pauses that schedule and not "victim"; a name
// with a slash, or a name that is a dot segment, is paused and resumed;
// a lease whose key is such a name opens its own page.
func TestNamesInPathsInChromium(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := t.Context()
	cat, err := schedule.NewCatalog(ctx, f.db, nil)
	require.NoError(t, err)
	names := []string{"victim", "zz/../victim", "a/b", "..", ".", "~tilde", "50%", "q?x#y"}
	for _, n := range names {
		_, err = cat.Put(ctx, schedule.Entry{Name: n, Every: time.Minute, Handler: "export"})
		require.NoError(t, err, n)
	}
	l, err := pglease.New(f.pool, nil)
	require.NoError(t, err)
	keys := []string{"zz/../held", ".", "~tilde/..", "50%?"}
	for _, k := range keys {
		_, err = l.TryAcquire(ctx, k, time.Minute)
		require.NoError(t, err, k)
	}
	ts := serve(t, &console.Config{DB: f.db})
	page := chromium.Open(t, 120*time.Second)
	exceptions, do := page.Exceptions, page.Do
	eval := func(what, js string) string {
		t.Helper()
		v, err := chromedp.Run(page.Ctx, chromedp.Evaluate[string](js))
		require.NoError(t, err, what)
		return v
	}
	paused := func(name string) bool {
		t.Helper()
		e, err := cat.Get(ctx, name)
		require.NoError(t, err, name)
		return e.Paused
	}
	// operate asks for op on the schedules page's button of name, confirms
	// it, and waits for the page the console sends back.
	operate := func(name, verb, notice string) {
		t.Helper()
		row := `tr[data-schedule="` + name + `"]`
		do("open the schedules", chromedp.Navigate(ts.URL+"/schedules"), chromedp.WaitVisible(chromedp.CSS(`#catalog`)))
		require.Equal(t, verb+"…", eval("the button", `document.querySelector('`+row+` a.button').innerText`), name)
		do(verb+" "+name, chromedp.Click(chromedp.CSS(row+` a.button`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
		require.Equal(t, verb+" "+name, eval("the confirmation", `document.querySelector('#confirm').innerText`), "the confirmation names %q", name)
		do("confirm", chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`p.notice`)))
		require.Contains(t, page.Text(), notice, name)
		require.Equal(t, name, eval("the page's schedule", `[...document.querySelectorAll('#catalog tr[data-schedule]')].map(r => r.dataset.schedule).join(',')`),
			"the console sent back %q's page", name)
	}

	operate("zz/../victim", "Pause", "Paused")
	require.True(t, paused("zz/../victim"), "the schedule operated is paused")
	require.False(t, paused("victim"), "victim is not the schedule operated")
	for _, n := range names[2:] {
		operate(n, "Pause", "Paused")
		require.True(t, paused(n), n)
		operate(n, "Resume", "Resumed")
		require.False(t, paused(n), n)
	}
	require.False(t, paused("victim"))

	for _, k := range keys {
		do("open the leases", chromedp.Navigate(ts.URL+"/leases"), chromedp.WaitVisible(chromedp.CSS(`#leases`)))
		do("open "+k, chromedp.Click(chromedp.CSS(`tr[data-key="`+k+`"] a`)), chromedp.WaitVisible(chromedp.CSS(`#lease`)))
		require.Equal(t, k, eval("the lease's key", `document.querySelector('#lease code').innerText`), "the page of lease %q", k)
	}
	require.Empty(t, exceptions())
}
